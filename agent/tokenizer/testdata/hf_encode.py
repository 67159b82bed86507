"""Encodes lines with HF `tokenizers` from a tokenizer.json: the reference ids for
bpe_trainer_test (a tokenizer the C++ trainer wrote must read the same in HF).

  hf_encode.py OUT_DIR  reads OUT_DIR/tokenizer.json and OUT_DIR/lines.json (a JSON list of
                        strings), writes OUT_DIR/ids.json (a list of id lists)
"""
import json
import os
import sys


def main():
    from tokenizers import Tokenizer

    out = sys.argv[1]
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    with open(os.path.join(out, "lines.json")) as f:
        lines = json.load(f)
    ids = [e.ids for e in tok.encode_batch(lines, add_special_tokens=False)]
    with open(os.path.join(out, "ids.json"), "w") as f:
        json.dump(ids, f)


if __name__ == "__main__":
    main()
