"""HF reference for agent/chat: a chat template implementing our format,
rendered by transformers on random conversations.

  make_chat_fixtures.py OUT_DIR

Reads OUT_DIR/tools.json (the C++ tool schemas, written by the test), trains
a small byte-level BPE tokenizer.json with HF `tokenizers` (Qwen2-style
split, NFC; <|im_start|>/<|im_end|>/<|endoftext|> special, the tool tags as
plain added tokens as in Qwen2.5), writes tokenizer_config.json with
CHAT_TEMPLATE next to it, loads both with transformers' AutoTokenizer and
renders random conversations with apply_chat_template(..., tools=...,
tokenize=True, return_assistant_tokens_mask=True). Writes
OUT_DIR/chat_fixtures.json: per conversation the messages, flags, HF's text,
ids and assistant mask.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tokenizer", "testdata"))
from make_tokenizer_fixtures import QWEN2_PATTERN, varied_lines  # noqa: E402

# Our format as a Jinja template (written for kernelrl; docs/LEARNER.md
# "Chat and tool-call format" is the specification). {% generation %} marks
# what the policy produces, so HF computes the assistant mask independently.
CHAT_TEMPLATE = r"""
{%- set ns = namespace(tools_text='') -%}
{%- if tools -%}
  {%- set ns.tools_text = '# Tools\n\nYou can call the functions below. Each is described by one JSON object per line inside <tools></tools>:\n<tools>\n' -%}
  {%- for t in tools -%}
    {%- set ns.tools_text = ns.tools_text + (t | tojson) + '\n' -%}
  {%- endfor -%}
  {%- set ns.tools_text = ns.tools_text + '</tools>\n\nTo call a function, write its name and arguments as a JSON object inside <tool_call></tool_call> tags:\n<tool_call>\n{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call>\nYou may call several functions in one reply. Each result comes back in a user message inside <tool_response></tool_response> tags.' -%}
  {%- if not messages or messages[0].role != 'system' -%}
    {{- '<|im_start|>system\n' + ns.tools_text + '<|im_end|>\n' -}}
  {%- endif -%}
{%- endif -%}
{%- for m in messages -%}
  {%- if m.role == 'system' -%}
    {%- if not loop.first -%}{{- raise_exception('a system message must come first') -}}{%- endif -%}
    {%- set content = m.content if m.content else '' -%}
    {%- if ns.tools_text -%}
      {%- set content = (content + '\n\n' + ns.tools_text) if content else ns.tools_text -%}
    {%- endif -%}
    {{- '<|im_start|>system\n' + content + '<|im_end|>\n' -}}
  {%- elif m.role == 'user' -%}
    {{- '<|im_start|>user\n' + m.content + '<|im_end|>\n' -}}
  {%- elif m.role == 'tool' -%}
    {{- '<|im_start|>user\n<tool_response>\n' + m.content + '\n</tool_response><|im_end|>\n' -}}
  {%- elif m.role == 'assistant' -%}
    {%- set body = namespace(text=(m.content if m.content else '')) -%}
    {%- for c in (m.tool_calls or []) -%}
      {%- set f = c.function if c.function is defined else c -%}
      {%- if body.text -%}{%- set body.text = body.text + '\n' -%}{%- endif -%}
      {%- set body.text = body.text + '<tool_call>\n{"name": ' + (f.name | tojson) + ', "arguments": ' + (f.arguments | tojson) + '}\n</tool_call>' -%}
    {%- endfor -%}
    {{- '<|im_start|>assistant\n' -}}
    {%- generation -%}
    {{- body.text + '<|im_end|>' -}}
    {%- endgeneration -%}
    {{- '\n' -}}
  {%- else -%}
    {{- raise_exception('unknown role ' + m.role) -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
"""

NASTY = ['{"a": "}"}', "}}}{{{", "line1\nline2\n", "tab\there", 'quote " and \\ backslash', "naïve café ☕ 日本語 😀",
         "e\u0301 combining", "<tool_call>", "</tool_call>", "\\n not a newline", "", " ", "\u2028sep", "a\u0000b",
         "__global__ void k(float* x) {\n  x[threadIdx.x] = 0.f;\n}\n", "<|im_start|>"]


def random_text(rng, allow_empty=True):
    r = rng.random()
    if allow_empty and r < 0.05:
        return ""
    if r < 0.3:
        return rng.choice(NASTY) + rng.choice(varied_lines(rng, 1))
    return "\n".join(varied_lines(rng, rng.randint(1, 4)))


def random_value(rng, prop):
    if prop["type"] == "integer":
        return rng.randint(prop.get("minimum", 0), 100000)
    if prop["type"] == "boolean":
        return rng.random() < 0.5
    if prop["type"] == "array":
        return [random_value(rng, prop["items"]) for _ in range(rng.randint(prop.get("minItems", 0), 3))]
    if prop["type"] == "object":
        return {k: random_value(rng, p) for k, p in prop["properties"].items()}
    if "enum" in prop:
        return rng.choice(prop["enum"])
    return random_text(rng)


def random_arguments(rng, schema):
    params = schema["function"]["parameters"]
    args = {}
    for key, prop in params["properties"].items():
        if key not in params["required"] and rng.random() < 0.5:
            continue
        args[key] = random_value(rng, prop)
    keys = list(args)
    rng.shuffle(keys)  # Key order is kept by tojson and by our dumps.
    return {k: args[k] for k in keys}


def random_conversation(rng, tools):
    msgs = []
    if rng.random() < 0.7:
        msgs.append({"role": "system", "content": random_text(rng)})
    msgs.append({"role": "user", "content": random_text(rng)})
    for _ in range(rng.randint(0, 4)):
        calls = []
        if tools and rng.random() < 0.8:
            for _ in range(1 if rng.random() < 0.8 else 2):
                t = rng.choice(tools)
                calls.append({"type": "function",
                              "function": {"name": t["function"]["name"], "arguments": random_arguments(rng, t)}})
        content = random_text(rng) if (not calls or rng.random() < 0.5) else (None if rng.random() < 0.5 else "")
        if content and rng.random() < 0.3:  # Leading whitespace merges with the header's "\n": mask boundary case.
            content = rng.choice(["\n", "\n\n", " ", "\t"]) + content
        m = {"role": "assistant", "content": content}
        if calls:
            m["tool_calls"] = calls
        msgs.append(m)
        if calls:
            for _ in calls:
                msgs.append({"role": "tool", "content": random_text(rng)})
        else:
            msgs.append({"role": "user", "content": random_text(rng)})
    if rng.random() < 0.4:
        msgs.append({"role": "assistant", "content": random_text(rng)})
    return msgs


def main(out):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import AutoTokenizer

    with open(os.path.join(out, "tools.json")) as f:
        tools = json.load(f)
    rng = random.Random(20261122)
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False),
    ])
    tok.decoder = decoders.ByteLevel()
    train = varied_lines(rng, 4000) + [json.dumps(t, ensure_ascii=False) for t in tools] * 20
    trainer = trainers.BpeTrainer(vocab_size=1500, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(train, trainer)
    tok.add_tokens(["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"])
    tok_dir = os.path.join(out, "tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    tok.save(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": CHAT_TEMPLATE,
                   "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "model_max_length": 1 << 20}, f)
    hf = AutoTokenizer.from_pretrained(tok_dir)

    convs = []
    for i in range(80):
        use_tools = i % 4 != 3
        msgs = random_conversation(rng, tools if use_tools else [])
        gen = msgs[-1]["role"] != "assistant" and rng.random() < 0.7
        kwargs = dict(tools=tools if use_tools else None, add_generation_prompt=gen)
        text = hf.apply_chat_template(msgs, tokenize=False, **kwargs)
        enc = hf.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                     **kwargs)
        ids = list(enc["input_ids"])
        assert ids == hf(text, add_special_tokens=False)["input_ids"]
        convs.append({"messages": msgs, "tools": use_tools, "add_generation_prompt": gen, "text": text, "ids": ids,
                      "assistant_mask": list(enc["assistant_masks"])})
    with open(os.path.join(out, "chat_fixtures.json"), "w") as f:
        json.dump({"tokenizer": os.path.join(tok_dir, "tokenizer.json"), "conversations": convs}, f,
                  ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv[1])
