"""The parser of the peers' README examples (tests/seed_examples.py): every curl of the server
is found, the page's flattening is undone, nothing else is changed."""

from tests.seed_examples import examples, logical_lines


def test_every_server_example_is_found_and_no_other():
    found = {seed: examples(seed) for seed in ("000", "003")}
    # OminiX-API: 4 speech, chat, transcription, 3 images, status, 4 loads, 2 unloads, version.
    # MiniInfer: 2 health checks, transcription, chat, completions, 4 session calls, speech.
    assert [len(found["000"]), len(found["003"])] == [17, 10]
    commands = [e.command for e in found["000"] + found["003"]]
    assert not any("raw.githubusercontent.com" in c for c in commands)  # the install script
    assert sum("/v1/models/load" in c for c in commands) == 4


def test_examples_keep_their_text_and_get_the_lines_they_need():
    transcription = next(e for e in examples("000") if "paraformer" in e.command)
    assert transcription.command.splitlines()[0] == "AUDIO_B64=$(base64 -i audio.wav)"
    assert transcription.against("http://h:1").splitlines()[1].startswith("curl http://h:1/v1/audio/transcriptions ")
    chunk = next(e for e in examples("003") if "@chunk.pcm" in e.command)
    assert chunk.command.startswith("SID=$(curl -s -X POST") and ".../v1/audio/stream/sessions" in chunk.command
    assert "http://h:1/v1/audio/stream/sessions/$SID" in chunk.against("http://h:1")


def test_the_page_flattening_is_undone():
    assert logical_lines("curl a \\ -H x \\ -F y") == ["curl a -H x -F y"]
    assert logical_lines("-d '{}'# Next example\ncurl b") == ["-d '{}'", "# Next example", "curl b"]
