"""A corpus of JSON Schemas written for this project in the shapes JSONSchemaBench collects
(guidance-ai/jsonschemabench: GitHub configs from trivial to ultra, Kubernetes objects, Snowplow
events, the Washington Post's ANS, Glaive function calls, JSON Schema Store tool configs), with
every keyword the grammar engine leaves to the check (oneOf, uniqueItems, dependencies,
dependentRequired, dependentSchemas, if/then/else, not, contains, propertyNames, min/maxProperties,
formats it does not know, patterns its regex engine cannot compile) and the ones it enforces
($ref/$defs and recursion, patternProperties, large enums, nested arrays, tuples, formats, type
lists, draft-04's forms), each with a request a small model can answer in a few dozen tokens.

No schema here comes from the benchmark: CI reaches only package registries, and the benchmark's
data is not committed (bench/jsonschemabench.py runs a sample of it from a local clone).

`SCHEMAS` are served (grammar, then check-and-retry); `REFUSED` are the shapes llguidance compiles
nothing close for, a 400 naming `response_format` (docs/api/chat.md lists both).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT7 = "http://json-schema.org/draft-07/schema#"


@dataclass(frozen=True)
class SchemaCase:
    name: str
    shape: str  # the JSONSchemaBench category it stands for
    keywords: tuple[str, ...]  # what it exercises
    ask: str  # what the prompt asks for
    schema: dict[str, Any]

    def body(self, **fields: Any) -> dict[str, Any]:
        """A chat request for an example of it, as strict structured output."""
        return {
            "messages": [{"role": "user", "content": f"Give one example as JSON: {self.ask}"}],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": self.name, "schema": self.schema, "strict": True},
            },
            **fields,
        }


def _str(n: int = 20, **more: Any) -> dict[str, Any]:
    return {"type": "string", "maxLength": n, **more}


def _object(properties: dict[str, Any], required: tuple[str, ...] = (), **more: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), **more}


COUNTRIES = [
    "AR", "AT", "AU", "BE", "BR", "CA", "CH", "CL", "CN", "CO", "CZ", "DE", "DK", "EG", "ES", "FI", "FR",
    "GB", "GR", "HU", "ID", "IE", "IL", "IN", "IT", "JP", "KE", "KR", "MA", "MX", "MY", "NG", "NL", "NO",
    "NZ", "PE", "PH", "PK", "PL", "PT", "RO", "RU", "SA", "SE", "SG", "TH", "TR", "UA", "US", "VN", "ZA",
]  # fmt: skip

SCHEMAS: list[SchemaCase] = [
    # ---- Glaive function calls: flat parameter objects -----------------------------------------
    SchemaCase(
        "get_weather",
        "Glaiveai2K",
        ("enum", "required"),
        "the arguments to get the weather in Paris in celsius",
        _object({"location": _str(), "unit": {"enum": ["celsius", "fahrenheit"]}}, ("location", "unit")),
    ),
    SchemaCase(
        "calculate_bmi",
        "Glaiveai2K",
        ("number", "exclusiveMinimum"),
        "the arguments to compute the BMI of someone 70 kg and 1.75 m tall",
        _object(
            {"weight": {"type": "number", "exclusiveMinimum": 0}, "height": {"type": "number", "exclusiveMinimum": 0}},
            ("weight", "height"),
        ),
    ),
    SchemaCase(
        "send_email",
        "Glaiveai2K",
        ("format:email", "required-not-in-properties"),
        "the arguments to email bob@example.com the subject Hello",
        # `body` is required but not listed, and extra properties are allowed (as sent)
        _object({"to": {"type": "string", "format": "email"}, "subject": _str()}, ("to", "subject", "body")),
    ),
    SchemaCase(
        "search_recipes",
        "Glaiveai2K",
        ("uniqueItems", "maxItems"),
        "the arguments to search recipes with the ingredients chicken and rice",
        _object(
            {"ingredients": {"type": "array", "items": _str(12), "uniqueItems": True, "minItems": 1, "maxItems": 3}},
            ("ingredients",),
        ),
    ),
    SchemaCase(
        "create_event",
        "Glaiveai2K",
        ("format:date", "format:time"),
        "the arguments to create a meeting called Standup on 2024-05-01 at 09:30:00",
        _object(
            {
                "title": _str(),
                "date": {"type": "string", "format": "date"},
                "time": {"type": "string", "format": "time"},
            },
            ("title", "date"),
        ),
    ),
    SchemaCase(
        "convert_currency",
        "Glaiveai2K",
        ("enum:large", "minimum"),
        "the arguments to convert 100 from USD to EUR",
        _object(
            {
                "amount": {"type": "number", "minimum": 0},
                "from": {"enum": ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "CNY", "INR", "BRL"]},
                "to": {"enum": ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "CNY", "INR", "BRL"]},
            },
            ("amount", "from", "to"),
        ),
    ),
    # ---- GitHub configs, trivial to ultra --------------------------------------------------------
    SchemaCase(
        "settings_flag",
        "Github_trivial",
        ("boolean", "draft-04"),
        "settings where printing in the endpoint is on",
        {
            "$schema": DRAFT4,
            **_object({"settings": _object({"printInEndpoint": {"type": "boolean"}}, ("printInEndpoint",))}),
            "required": ["settings"],
        },
    ),
    SchemaCase(
        "version_string",
        "Github_trivial",
        ("pattern",),
        "a package version 1.2.3",
        _object({"version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$"}}, ("version",)),
    ),
    SchemaCase(
        "nullable_name",
        "Github_easy",
        ("type-list", "null"),
        "a contact whose nickname is unknown",
        _object({"name": _str(), "nickname": {"type": ["string", "null"], "maxLength": 10}}, ("name", "nickname")),
    ),
    SchemaCase(
        "matrix",
        "Github_easy",
        ("nested-arrays",),
        "a 2 by 2 matrix of small integers",
        _object(
            {
                "rows": {
                    "type": "array",
                    "items": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 2},
                    "minItems": 2,
                    "maxItems": 2,
                }
            },
            ("rows",),
        ),
    ),
    SchemaCase(
        "point_tuple",
        "Github_easy",
        ("prefixItems",),
        "a point with the coordinates 3 and 4",
        _object(
            {"point": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}], "items": False}},
            ("point",),
        ),
    ),
    SchemaCase(
        "legacy_tuple",
        "Github_easy",
        ("items-array", "additionalItems", "draft-04"),
        "an RGB color with the values 255, 0 and 128",
        {
            "$schema": DRAFT4,
            **_object(
                {
                    "rgb": {
                        "type": "array",
                        "items": [{"type": "integer"}, {"type": "integer"}, {"type": "integer"}],
                        "additionalItems": False,
                    }
                },
                ("rgb",),
            ),
        },
    ),
    SchemaCase(
        "unique_ports",
        "Github_easy",
        ("uniqueItems", "integer-range"),
        "a server listening on the ports 80 and 443",
        _object(
            {
                "host": _str(),
                "ports": {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 1, "maximum": 65535},
                    "uniqueItems": True,
                    "minItems": 2,
                    "maxItems": 3,
                },
            },
            ("host", "ports"),
        ),
    ),
    SchemaCase(
        "scripts_map",
        "Github_medium",
        ("additionalProperties-schema", "maxProperties"),
        "npm scripts with a build command and a test command",
        _object(
            {"scripts": {"type": "object", "additionalProperties": _str(16), "minProperties": 1, "maxProperties": 2}},
            ("scripts",),
        ),
    ),
    SchemaCase(
        "env_vars",
        "Github_medium",
        ("patternProperties",),
        "environment variables HOME set to /root",
        _object({"env": {"type": "object", "patternProperties": {"^[A-Z_]+$": _str()}, "maxProperties": 2}}, ("env",)),
    ),
    SchemaCase(
        "shape_oneof",
        "Github_medium",
        ("oneOf", "required"),
        "a circle of radius 2",
        {
            "oneOf": [
                _object({"radius": {"type": "number"}}, ("radius",)),
                _object({"side": {"type": "number"}}, ("side",)),
            ]
        },
    ),
    SchemaCase(
        "id_oneof_overlap",
        "Github_medium",
        ("oneOf:overlap",),
        "a record with the id 7",
        # an integer is also a number: exactly one branch must match, so 7 is not an answer
        _object({"id": {"oneOf": [{"type": "integer"}, {"type": "number", "minimum": 0.5, "maximum": 9}]}}, ("id",)),
    ),
    SchemaCase(
        "payment_dependencies",
        "Github_medium",
        ("dependencies", "draft-07"),
        "a payment by a credit card number with a billing address",
        {
            "$schema": DRAFT7,
            **_object(
                {"name": _str(), "credit_card": _str(16, pattern="^[0-9]+$"), "billing_address": _str(30)},
                ("name",),
            ),
            "dependencies": {"credit_card": ["billing_address"]},
        },
    ),
    SchemaCase(
        "shipping_dependent_required",
        "Github_medium",
        ("dependentRequired",),
        "an order shipped to a street in Lyon",
        {
            **_object({"item": _str(), "ship": {"type": "boolean"}, "street": _str(30)}, ("item", "ship")),
            "dependentRequired": {"ship": ["street"]},
        },
    ),
    SchemaCase(
        "license_dependent_schemas",
        "Github_hard",
        ("dependentSchemas",),
        "a package licensed as MIT with its license file",
        {
            **_object({"name": _str(), "license": _str(10)}, ("name", "license")),
            "dependentSchemas": {"license": {"properties": {"license_file": _str()}, "required": ["license_file"]}},
        },
    ),
    SchemaCase(
        "address_if_then_else",
        "Github_hard",
        ("if", "then", "else"),
        "a postal address in the US with its zip code",
        {
            **_object({"country": {"enum": ["US", "CA"]}, "postal_code": _str(7)}, ("country", "postal_code")),
            "if": {"properties": {"country": {"const": "US"}}},
            "then": {"properties": {"postal_code": {"pattern": "^[0-9]{5}$"}}},
            "else": {"properties": {"postal_code": {"pattern": "^[A-Z][0-9][A-Z] [0-9][A-Z][0-9]$"}}},
        },
    ),
    SchemaCase(
        "user_not_admin",
        "Github_hard",
        ("not",),
        "a user account named alice",
        _object({"username": _str(16, **{"not": {"enum": ["root", "admin"]}})}, ("username",)),
    ),
    SchemaCase(
        "no_debug",
        "Github_hard",
        ("not:required",),
        "build options with optimisation on",
        {**_object({"optimize": {"type": "boolean"}, "debug": {"type": "boolean"}}), "not": {"required": ["debug"]}},
    ),
    SchemaCase(
        "steps_contains",
        "Github_hard",
        ("contains",),
        "a pipeline whose steps include a step named test",
        _object(
            {
                "steps": {
                    "type": "array",
                    "items": _str(10),
                    "contains": {"const": "test"},
                    "minItems": 1,
                    "maxItems": 3,
                }
            },
            ("steps",),
        ),
    ),
    SchemaCase(
        "lowercase_keys",
        "Github_hard",
        ("propertyNames",),
        "labels with the key team set to web",
        _object(
            {
                "labels": {
                    "type": "object",
                    "additionalProperties": _str(10),
                    "propertyNames": {"pattern": "^[a-z]+$"},
                    "maxProperties": 2,
                }
            },
            ("labels",),
        ),
    ),
    SchemaCase(
        "slug_lookahead",
        "Github_hard",
        ("pattern:lookahead",),
        "a page slug for the about page",
        # a look-ahead llguidance's regex engine cannot compile: the grammar keeps the string, the check the pattern
        _object({"slug": {"type": "string", "pattern": "^(?!-)[a-z-]{1,16}$"}}, ("slug",)),
    ),
    SchemaCase(
        "lookahead_keys",
        "JsonSchemaStore",
        ("patternProperties:lookahead",),
        "a message keyed greeting with the text Hello",
        # the key's look-ahead is taken out of the grammar's regex and checked
        {
            "type": "object",
            "patternProperties": {"^(?!@@)[a-z_]+$": _object({"message": _str()}, ("message",))},
            "minProperties": 1,
            "maxProperties": 1,
        },
    ),
    SchemaCase(
        "tree",
        "Github_ultra",
        ("$defs", "$ref:recursive"),
        "a tree whose root has the value 1 and no children",
        {
            "$defs": {
                "node": _object(
                    {
                        "value": {"type": "integer"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
                    },
                    ("value",),
                )
            },
            "$ref": "#/$defs/node",
        },
    ),
    SchemaCase(
        "workflow",
        "Github_ultra",
        ("definitions", "$ref", "anyOf", "uniqueItems", "allOf"),
        "a CI workflow named ci that runs on push",
        {
            "$schema": DRAFT7,
            "definitions": {
                "event": {"enum": ["push", "pull_request", "schedule"]},
                "named": _object({"name": _str(12)}, ("name",)),
            },
            "allOf": [{"$ref": "#/definitions/named"}],
            **_object(
                {
                    "name": _str(12),
                    "on": {
                        "anyOf": [
                            {"$ref": "#/definitions/event"},
                            {"type": "array", "items": {"$ref": "#/definitions/event"}, "uniqueItems": True},
                        ]
                    },
                },
                ("name", "on"),
            ),
        },
    ),
    # ---- Kubernetes objects ---------------------------------------------------------------------
    SchemaCase(
        "k8s_port",
        "Kubernetes",
        ("int-or-string", "format:int32"),
        "a container port named http on port 8080",
        _object(
            {
                "name": _str(15),
                "containerPort": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 65535},
                "targetPort": {"oneOf": [{"type": "integer"}, _str(15)], "x-kubernetes-int-or-string": True},
            },
            ("containerPort",),
        ),
    ),
    SchemaCase(
        "k8s_metadata",
        "Kubernetes",
        ("additionalProperties-schema", "maxProperties"),
        "object metadata named web with the label app set to web",
        _object(
            {
                "name": _str(20),
                "namespace": _str(20),
                "labels": {"type": "object", "additionalProperties": _str(12), "maxProperties": 1},
            },
            ("name",),
        ),
    ),
    SchemaCase(
        "k8s_resources",
        "Kubernetes",
        ("patternProperties", "anyOf"),
        "container resource limits of 500m cpu",
        _object(
            {
                "limits": {
                    "type": "object",
                    "patternProperties": {"^(cpu|memory)$": {"anyOf": [_str(8), {"type": "number"}]}},
                    "additionalProperties": False,
                    "maxProperties": 2,
                }
            },
            ("limits",),
        ),
    ),
    SchemaCase(
        "k8s_probe",
        "Kubernetes",
        ("nested-objects", "format:int32"),
        "an HTTP liveness probe on /healthz port 8080",
        _object(
            {
                "httpGet": _object(
                    {
                        "path": _str(),
                        "port": {"type": "integer", "format": "int32"},
                        "scheme": {"enum": ["HTTP", "HTTPS"]},
                    },
                    ("port",),
                ),
                "periodSeconds": {"type": "integer", "format": "int32", "minimum": 1},
            },
            ("httpGet",),
        ),
    ),
    # ---- Snowplow self-describing events ---------------------------------------------------------
    SchemaCase(
        "snowplow_event",
        "Snowplow",
        ("self", "maxLength", "type-list"),
        "a link click event on https://example.com",
        {
            "$schema": "http://iglucentral.com/schemas/com.snowplowanalytics.self-desc/schema/jsonschema/1-0-0#",
            "self": {"vendor": "com.example", "name": "link_click", "format": "jsonschema", "version": "1-0-0"},
            **_object(
                {
                    "targetUrl": {"type": "string", "format": "uri", "maxLength": 40},
                    "elementId": {"type": ["string", "null"], "maxLength": 10},
                },
                ("targetUrl",),
                additionalProperties=False,
            ),
        },
    ),
    SchemaCase(
        "snowplow_ids",
        "Snowplow",
        ("format:uuid", "integer-range"),
        "a session with a uuid session id and the index 1",
        _object(
            {
                "sessionId": {"type": "string", "format": "uuid"},
                "sessionIndex": {"type": "integer", "minimum": 0, "maximum": 2147483647},
            },
            ("sessionId", "sessionIndex"),
            additionalProperties=False,
        ),
    ),
    SchemaCase(
        "snowplow_timing",
        "Snowplow",
        ("format:date-time", "multipleOf"),
        "a page timing of 0.5 seconds measured at 2024-01-01T12:00:00Z",
        _object(
            {"at": {"type": "string", "format": "date-time"}, "seconds": {"type": "number", "multipleOf": 0.25}},
            ("at", "seconds"),
        ),
    ),
    SchemaCase(
        "snowplow_geo",
        "Snowplow",
        ("enum:large", "number-range"),
        "a geolocation in France at latitude 48.8 and longitude 2.3",
        _object(
            {
                "country": {"enum": COUNTRIES},
                "latitude": {"type": "number", "minimum": -90, "maximum": 90},
                "longitude": {"type": "number", "minimum": -180, "maximum": 180},
            },
            ("country", "latitude", "longitude"),
        ),
    ),
    # ---- The Washington Post's ANS ---------------------------------------------------------------
    SchemaCase(
        "ans_operation",
        "WashingtonPost",
        ("allOf", "required-in-allOf", "draft-04"),
        "an operation that inserts the story with the id abc",
        {
            "$schema": DRAFT4,
            "type": "object",
            "allOf": [
                _object(
                    {
                        "type": {"enum": ["story-operation"]},
                        "operation": {"enum": ["insert", "delete"]},
                        "id": _str(10),
                    },
                    ("type", "operation", "id"),
                )
            ],
        },
    ),
    SchemaCase(
        "ans_headlines",
        "WashingtonPost",
        ("definitions", "$ref", "patternProperties"),
        "headlines whose basic headline is Hello",
        {
            "$schema": DRAFT4,
            "definitions": {
                "dictionary": {"type": "object", "patternProperties": {"^[a-zA-Z0-9_]*$": _str(20)}, "maxProperties": 1}
            },
            **_object({"headlines": {"$ref": "#/definitions/dictionary", "required": ["basic"]}}, ("headlines",)),
        },
    ),
    SchemaCase(
        "ans_credits",
        "WashingtonPost",
        ("draft-04", "exclusiveMaximum:boolean", "minItems"),
        "credits by one author named Ann with a rating of 3",
        {
            "$schema": DRAFT4,
            **_object(
                {
                    "by": {
                        "type": "array",
                        "items": _object({"name": _str()}, ("name",)),
                        "minItems": 1,
                        "maxItems": 2,
                    },
                    "rating": {"type": "integer", "minimum": 0, "maximum": 5, "exclusiveMaximum": True},
                },
                ("by", "rating"),
            ),
        },
    ),
    # ---- JSON Schema Store tool configs ----------------------------------------------------------
    SchemaCase(
        "eslint_rule",
        "JsonSchemaStore",
        ("oneOf", "enum", "const"),
        "an eslint config that turns the rule semi to error",
        _object(
            {
                "rules": _object(
                    {
                        "semi": {
                            "oneOf": [
                                {"enum": ["off", "warn", "error"]},
                                {"type": "integer", "minimum": 0, "maximum": 2},
                            ]
                        }
                    },
                    ("semi",),
                ),
                "root": {"const": True},
            },
            ("rules",),
        ),
    ),
    SchemaCase(
        "tsconfig_target",
        "JsonSchemaStore",
        ("anyOf", "enum", "pattern"),
        "a tsconfig whose target is ES2020",
        _object(
            {
                "compilerOptions": _object(
                    {
                        "target": {
                            "anyOf": [{"enum": ["ES5", "ES2015", "ES2020", "ESNext"]}, {"pattern": "^[Ee][Ss][0-9]+$"}]
                        }
                    },
                    ("target",),
                )
            },
            ("compilerOptions",),
        ),
    ),
    SchemaCase(
        "renovate_schedule",
        "JsonSchemaStore",
        ("if", "then", "dependentRequired", "uniqueItems"),
        "a renovate config that is enabled with the schedule weekly",
        {
            **_object(
                {
                    "enabled": {"type": "boolean"},
                    "schedule": {
                        "type": "array",
                        "items": {"enum": ["daily", "weekly", "monthly"]},
                        "uniqueItems": True,
                        "maxItems": 2,
                    },
                    "timezone": _str(16),
                },
                ("enabled",),
            ),
            "if": {"properties": {"enabled": {"const": True}}},
            "then": {"required": ["schedule"]},
            "dependentRequired": {"timezone": ["schedule"]},
        },
    ),
    SchemaCase(
        "docker_compose_port",
        "JsonSchemaStore",
        ("format:ports", "oneOf"),
        "a docker compose service web exposing the port 80:80",
        _object(
            {
                "image": _str(16),
                "ports": {
                    "type": "array",
                    "items": {
                        "oneOf": [
                            {"type": "number", "format": "ports"},
                            {"type": "string", "format": "ports", "maxLength": 11},
                        ]
                    },
                    "uniqueItems": True,
                    "maxItems": 2,
                },
            },
            ("image",),
        ),
    ),
    SchemaCase(
        "regex_rule",
        "JsonSchemaStore",
        ("format:regex",),
        "a lint rule that forbids names matching the regular expression ^tmp",
        _object(
            {"name": _str(12), "forbid": {"type": "string", "format": "regex", "maxLength": 16}}, ("name", "forbid")
        ),
    ),
    SchemaCase(
        "json_pointer_ref",
        "JsonSchemaStore",
        ("format:json-pointer", "format:uri-reference"),
        "a reference to the JSON pointer /definitions/a in the file a.json",
        _object(
            {
                "pointer": {"type": "string", "format": "json-pointer", "maxLength": 20},
                "file": {"type": "string", "format": "uri-reference", "maxLength": 20},
            },
            ("pointer", "file"),
        ),
    ),
    SchemaCase(
        "min_properties_open",
        "JsonSchemaStore",
        ("minProperties", "required-not-in-properties"),
        "a translation with the keys en and fr",
        # lists one key and asks for two: closed, it could never be met
        {"type": "object", "properties": {"en": _str()}, "required": ["en"], "minProperties": 2, "maxProperties": 2},
    ),
    SchemaCase(
        "binary_blob",
        "JsonSchemaStore",
        ("format:byte", "format:custom"),
        "an attachment named a.txt with the base64 content aGk=",
        _object(
            {
                "name": _str(12),
                "data": {"type": "string", "format": "byte", "maxLength": 12},
                "mime": _str(12, format="mime-type"),
            },
            ("name", "data"),
        ),
    ),
]

# What llguidance compiles nothing close for: a 400 naming response_format (code invalid_json_schema).
REFUSED: list[SchemaCase] = [
    SchemaCase(
        "remote_ref",
        "Github_medium",
        ("$ref:remote",),
        "a geometry",
        {"$ref": "https://example.com/schemas/geometry.json"},  # nothing is fetched
    ),
    SchemaCase(
        "overlapping_pattern_keys",
        "JsonSchemaStore",
        ("patternProperties:overlapping",),
        "settings keyed by name",
        # a key may match both regexes: llguidance wants them disjoint
        {"type": "object", "patternProperties": {"^x": {"type": "integer"}, "y$": _str()}},
    ),
    SchemaCase(
        "recursive_ref_with_siblings",
        "WashingtonPost",
        ("$ref:recursive+siblings",),
        "a content element",
        {
            "definitions": {
                "content": _object(
                    {
                        "items": {
                            "type": "array",
                            "items": {"allOf": [{"$ref": "#/definitions/content"}, {"type": "object"}]},
                        }
                    }
                )
            },
            "$ref": "#/definitions/content",
        },
    ),
]
