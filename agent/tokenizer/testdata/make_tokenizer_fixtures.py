"""Writes reference fixtures for the tokenizer's C++ tests, from HF `tokenizers`.

  make_tokenizer_fixtures.py OUT_DIR  a byte-level BPE tokenizer.json trained
                                      on generated varied text, plus HF's ids
                                      for >= 10,000 other lines
  make_tokenizer_fixtures.py OUT_DIR chat
                                      only OUT_DIR/tokenizer.json: the Qwen2-style
                                      one with the ChatML and tool-call tokens, for
                                      tests that need a tokenizer, not parity data

Everything is generated at test time from fixed seeds; nothing comes from a hub.
"""
import json
import os
import random
import sys


def varied_lines(rng, n):
    """Code, prose, unicode, digits and whitespace runs, mixed line by line."""
    words = ["the", "kernel", "thread", "block", "warp", "memory", "float", "return", "self", "def",
             "__global__", "void", "int", "torch", "tensor", "Ünïcödé", "naïve", "café", "日本語", "中文",
             "テスト", "한국어", "Привет", "мир", "γειά", "σου", "مرحبا", "שלום", "हिन्दी", "ไทย", "😀", "🚀",
             "x²", "½", "Ⅻ", "٣", "१२३", "A100", "H100", "sm_90", "don't", "it's", "we're", "I'LL", "you'VE"]
    snippets = ["for (int i = 0; i < n; ++i) {", "    x[i] = a * x[i] + y[i];", "}", "#include <cuda_runtime.h>",
                "def forward(self, x):", "\treturn torch.relu(x) @ w.T", "if (idx >= N) return;",
                "__syncthreads();", "    // TODO: vectorize with float4", "out = (a+b)*c/d - e%f;",
                "s = \"quoted \\\"string\\\"\"", "x\t=\t1;\r\ny = 2;", "    \n", "a  b   c    d", "'''doc'''",
                "{\"key\": [1, 2.5, -3e10]}", "<|im_start|>", "1234567890 12 345 6789", "\u00a0nbsp\u3000ideo",
                "e\u0301 combining", "\u200bzero width", "tab\tsep\tvalues", "trailing spaces   ", "  leading"]
    lines = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.35:
            lines.append(rng.choice(snippets) + " " * rng.randint(0, 3) + rng.choice(snippets))
        elif kind < 0.7:
            k = rng.randint(1, 14)
            seps = [" ", " ", " ", "  ", "\t", ", ", ". ", "\n", "   ", "'s ", "-"]
            lines.append("".join(rng.choice(words) + rng.choice(seps) for _ in range(k)))
        elif kind < 0.85:
            lines.append("".join(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff),
                                                 rng.randint(0x3000, 0x9fff), rng.randint(0x1f300, 0x1f64f)]))
                                 for _ in range(rng.randint(1, 30))))
        else:
            lines.append(" " * rng.randint(0, 6) + str(rng.randint(0, 10**rng.randint(1, 12))) +
                         "\n" * rng.randint(0, 3) + " " * rng.randint(0, 4) + rng.choice(words))
    return lines


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")


def make_tokenizer(out, n_eval=10000, chat_only=False):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    rng = random.Random(42)
    train = varied_lines(rng, 6000)
    evals = varied_lines(rng, n_eval)
    # Also some multi-line documents (chat-like text) so newline runs are covered.
    evals += ["\n".join(varied_lines(rng, rng.randint(2, 6))) for _ in range(500)]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    result = {"lines": evals, "cases": {}}
    cases = [("qwen2", QWEN2_PATTERN, True, False), ("llama3", LLAMA3_PATTERN, False, True)]
    for name, pattern, nfc, ignore_merges in cases[:1] if chat_only else cases:
        tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
        if nfc:
            tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False),
        ])
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=1200, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(train, trainer)
        if chat_only:
            tok.save(os.path.join(out, "tokenizer.json"))
            return
        path = os.path.join(out, "tokenizer_%s.json" % name)
        tok.save(path)
        ids = [e.ids for e in tok.encode_batch(evals, add_special_tokens=False)]
        result["cases"][name] = {"tokenizer": path, "ids": ids, "nfc": nfc}
    with open(os.path.join(out, "tokenizer_fixtures.json"), "w") as f:
        json.dump(result, f, ensure_ascii=False)


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    if sys.argv[2:] == ["chat"]:
        make_tokenizer(out, n_eval=0, chat_only=True)
    else:
        make_tokenizer(out)
