"""bench/transformers_peer.py's own logic (its generate() run needs PyTorch, which the GPU check's
machine has and this project does not install): the left-padded batch and the per-step figures."""

from bench.transformers_peer import left_padded, per_step


def test_prompts_are_padded_on_the_left_and_the_mask_hides_the_padding():
    ids, mask = left_padded([[5, 6, 7], [8]], pad=0)
    assert ids == [[5, 6, 7], [0, 0, 8]] and mask == [[1, 1, 1], [0, 0, 1]]


def test_figures_per_step_match_bench_engine():
    assert per_step(generated=256, steps=128, wall=2.0, cpu=0.5) == {
        "tokens": 256,
        "tokens_per_s": 128.0,
        "steps": 128,
        "host_ms_per_step": 0.5 / 128 * 1e3,
        "wall_ms_per_step": 2.0 / 128 * 1e3,
    }
