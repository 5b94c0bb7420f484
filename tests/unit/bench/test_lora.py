"""The LoRA scenario's requests and table (bench/lora.py), without running it."""

from bench.lora import adapter_of, body, render


def test_every_stream_generates_its_tokens_and_the_adapters_share_the_streams():
    eos = [0, 2]
    b = body(3, 1, 64, eos)
    assert b["max_tokens"] == 64 and b["temperature"] == 0
    assert b["logit_bias"] == {"0": -100, "2": -100}  # an adapter's short answer does not end it
    assert body(3, 1, 64, eos)["messages"] != body(3, 2, 64, eos)["messages"]  # no wave reuses a prompt
    names = ["apricot", "basalt", "cobalt", "dahlia"]
    assert [adapter_of(i, names) for i in range(16)].count("cobalt") == 4


def test_the_table_says_the_ratios():
    level = {
        "base": {"tokens_per_s": 200.0, "tokens": 1024, "wall_s": 5.1},
        "adapters": {"tokens_per_s": 180.0, "tokens": 1024, "wall_s": 5.7},
        "mlx_lm_server_adapters": {"tokens_per_s": 45.0, "tokens": 1024, "wall_s": 22.8},
        "adapters_vs_base": 0.9,
        "adapters_vs_mlx_lm_server": 4.0,
    }
    text = render({"levels": {"16": level}, "adapters": ["a", "b", "c", "d"], "goal": 0.8})
    assert "0.90x the base alone (goal 0.8x), 4.0x mlx_lm.server" in text
    assert "| 16 | adapters | 180" in text
