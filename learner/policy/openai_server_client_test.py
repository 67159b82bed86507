"""The `openai` Python client against the learner's OpenAI-compatible server.

  openai_server_client_test.py BASE_URL CHECKPOINT_DIR

Oracles are independent of the server's C++: Hugging Face transformers'
greedy generation and log-softmax on the same checkpoint, and the `tokenizers`
library rendering ChatML by hand. Started by openai_server_client_test.sh.
"""
import json
import math
import os
import random
import sys
import unittest

import openai
import torch
from tokenizers import Tokenizer
from transformers import Qwen2ForCausalLM

BASE_URL, CKPT = sys.argv[1], sys.argv[2]
MODEL = "tiny-policy"
VERSION = 7
SEED = int.from_bytes(os.urandom(4), "little")
print(f"seed {SEED}", flush=True)


class OpenAIClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = openai.OpenAI(base_url=BASE_URL, api_key="unused", max_retries=0, timeout=120)
        cls.model = Qwen2ForCausalLM.from_pretrained(CKPT, dtype=torch.float32).eval()
        cls.tok = Tokenizer.from_file(os.path.join(CKPT, "tokenizer.json"))
        cls.rng = random.Random(SEED)
        cls.im_end = cls.tok.token_to_id("<|im_end|>")

    def hf_greedy(self, prompt, n, stop=None):
        """Greedy ids and their log-probs from transformers (stopping after `stop`)."""
        ids = list(prompt)
        out, lps = [], []
        with torch.no_grad():
            for _ in range(n):
                logits = self.model(torch.tensor([ids])).logits[0, -1].float()
                nxt = int(logits.argmax())
                out.append(nxt)
                lps.append(float(torch.log_softmax(logits, -1)[nxt]))
                ids.append(nxt)
                if nxt == stop:
                    break
        return out, lps

    def random_prompt(self):
        return [self.rng.randint(5, self.tok.get_vocab_size() - 10) for _ in range(self.rng.randint(4, 40))]

    def test_models(self):
        models = self.client.models.list()
        self.assertEqual([m.id for m in models.data], [MODEL])
        self.assertEqual(models.data[0].model_dump()["policy_version"], VERSION)

    def test_completion_ids_and_logprobs_equal_transformers(self):
        prompt = self.random_prompt()
        n = self.rng.randint(2, 16)
        want, want_lps = self.hf_greedy(prompt, n)
        r = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0, logprobs=0,
                                           extra_body={"return_token_ids": True})
        c = r.choices[0].model_dump()
        self.assertEqual(c["token_ids"], want)
        self.assertEqual(c["prompt_token_ids"], prompt)
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.choices[0].text, self.tok.decode(want, skip_special_tokens=True))
        got = r.choices[0].logprobs.token_logprobs
        self.assertEqual(len(got), n)
        for g, w in zip(got, want_lps):
            self.assertTrue(math.isclose(g, w, abs_tol=2e-3), (g, w))
        self.assertEqual(r.usage.prompt_tokens, len(prompt))
        self.assertEqual(r.usage.completion_tokens, n)
        self.assertEqual(r.model_dump()["policy_version"], VERSION)

    def test_completion_stream_adds_up(self):
        prompt = self.random_prompt()
        n = self.rng.randint(3, 12)
        plain = self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0,
                                               extra_body={"return_token_ids": True})
        text, ids, finish = "", [], None
        for chunk in self.client.completions.create(model=MODEL, prompt=prompt, max_tokens=n, temperature=0,
                                                    stream=True, extra_body={"return_token_ids": True}):
            for c in chunk.choices:
                text += c.text
                ids += c.model_dump().get("token_ids") or []
                finish = c.finish_reason or finish
        self.assertEqual(ids, plain.choices[0].model_dump()["token_ids"])
        self.assertEqual(text, plain.choices[0].text)
        self.assertEqual(finish, "length")

    def chatml(self, messages):
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        return self.tok.encode(text + "<|im_start|>assistant\n", add_special_tokens=False).ids

    def test_chat_prompt_reply_and_logprobs(self):
        words = ["kernel", "tile", "warp", "shared", "memory", "relu", "matmul", "fuse", "block", "grid"]
        messages = [{"role": "system", "content": "You write fast CUDA kernels."},
                    {"role": "user", "content": " ".join(self.rng.choice(words) for _ in range(12))}]
        prompt = self.chatml(messages)
        want, want_lps = self.hf_greedy(prompt, 24, stop=self.im_end)
        r = self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=24, temperature=0,
                                                logprobs=True, extra_body={"return_token_ids": True})
        d = r.model_dump()
        self.assertEqual(d["prompt_token_ids"], prompt)
        self.assertEqual(d["choices"][0]["token_ids"], want)
        self.assertEqual(r.choices[0].finish_reason, "stop" if want[-1] == self.im_end else "length")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertEqual(r.choices[0].message.content, self.tok.decode(want, skip_special_tokens=True))
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), len(want))
        for entry, w in zip(content, want_lps):
            self.assertTrue(math.isclose(entry.logprob, w, abs_tol=2e-3), (entry.logprob, w))

    def test_chat_stream_with_usage(self):
        messages = [{"role": "user", "content": f"Profile kernel {self.rng.randint(0, 10**6)}"}]
        plain = self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, temperature=0)
        text, usage, roles = "", None, []
        for chunk in self.client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10,
                                                         temperature=0, stream=True,
                                                         stream_options={"include_usage": True}):
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                text += c.delta.content or ""
                if c.delta.role:
                    roles.append(c.delta.role)
        self.assertEqual(text, plain.choices[0].message.content)
        self.assertEqual(roles, ["assistant"])
        self.assertIsNotNone(usage)
        self.assertEqual(usage.completion_tokens, plain.usage.completion_tokens)

    def test_errors(self):
        with self.assertRaises(openai.NotFoundError) as e:
            self.client.completions.create(model="gpt-5", prompt=[1, 2, 3], max_tokens=2)
        self.assertEqual(e.exception.status_code, 404)
        self.assertEqual(e.exception.body["code"], "model_not_found")
        with self.assertRaises(openai.BadRequestError) as e:
            self.client.completions.create(model=MODEL, prompt=self.random_prompt(), max_tokens=2, logprobs=3)
        self.assertEqual(e.exception.status_code, 400)
        self.assertEqual(e.exception.body["param"], "logprobs")
        with self.assertRaises(openai.BadRequestError):
            self.client.chat.completions.create(model=MODEL, messages=[], max_tokens=2)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
