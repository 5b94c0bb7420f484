"""Chat requests through an LLM engine, answered as a client reads them (text, tool calls,
log-probabilities): the same helper for a sharded engine's rank 0 (tests/gang_ranks.py) and the
whole model's engine it is compared with."""

from __future__ import annotations


async def answer(engine, body: dict) -> list[dict]:
    from deployments.generation.sampling import SamplingParams
    from deployments.llm.constraints import checked_constraint
    from deployments.llm.prompts import chat_prompt
    from deployments.protocol.generation import collect_choices
    from deployments.protocol.openai import ChatCompletionRequest

    request = ChatCompletionRequest.model_validate(body)
    prompt = chat_prompt(engine.tokenizer, request)
    params = SamplingParams.from_request(request, request.max_tokens, {})
    n = request.choice_count()
    guided = await engine.guide(checked_constraint(request), prompt, n)
    chunks = [
        c async for c in engine.generate(prompt, params, request.template_tools(), n, request.logprob_count(), guided)
    ]
    choices, _ = collect_choices(chunks)
    return [
        {
            "content": c.content,
            "calls": [(t.function.name, t.function.arguments) for t in c.tool_calls],
            "finish": c.finish_reason,
            "logprobs": [(e.token, round(e.logprob, 3)) for e in c.logprobs or []],
        }
        for c in choices.values()
    ]
