"""What vLLM 0.11.0's API server does with a model's chat template on every /v1/chat/completions request, timed
(engine_versions.VLLM_0110_TEMPLATE_PARSE_SECONDS).

vLLM 0.11.0's apply_hf_chat_template calls resolve_chat_template_kwargs (vllm/entrypoints/chat_utils.py of the 0.11.0
sdist), which on each request builds an ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), parses the template and walks it for undeclared variables; 0.11.1
memoizes the result. This script does the same three calls with jinja2 on a template you give (a tokenizer_config.json
with a "chat_template" string, or a .jinja file), and for comparison renders the compiled template once per request
(what every release does), timing each in CPU seconds of this process (time.process_time: other processes on the
machine do not count). The template is read from your disk; none is shipped with llmcalc.

    python benchmarks/chat_template_parse.py PATH [--repeat 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.meta
import jinja2.nodes
import jinja2.sandbox


class AssistantTracker(jinja2.ext.Extension):
    """The {% generation %} tag as vLLM 0.11.0 registers it for the parse (chat_utils.py, adapted from transformers)."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.CallBlock:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)


def per_request_parse(template: str) -> set[str]:
    """vLLM 0.11.0's resolve_chat_template_kwargs' work on the template, once (its kwargs filtering aside)."""
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    return jinja2.meta.find_undeclared_variables(env.parse(template))


def cpu_ms(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """(fastest, median) CPU milliseconds of `repeat` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append((time.process_time() - start) * 1e3)
    return min(times), statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", type=Path, help="tokenizer_config.json (its chat_template) or a .jinja file")
    ap.add_argument("--repeat", type=int, default=40)
    args = ap.parse_args()
    text = args.path.read_text()
    template = json.loads(text)["chat_template"] if args.path.suffix == ".json" else text
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    compiled = env.from_string(template)
    messages = [{"role": "user", "content": "word " * 200}]
    parse = cpu_ms(lambda: per_request_parse(template), args.repeat)
    render = cpu_ms(lambda: compiled.render(messages=messages, add_generation_prompt=True, tools=None), args.repeat)
    print(f"template: {len(template):,} characters, jinja2 {jinja2.__version__}")
    print(f"vLLM 0.11.0's per-request parse: {parse[0]:.2f} ms fastest, {parse[1]:.2f} ms median (CPU)")
    print(f"rendering the compiled template: {render[0]:.3f} ms fastest, {render[1]:.3f} ms median (CPU)")


if __name__ == "__main__":
    main()
