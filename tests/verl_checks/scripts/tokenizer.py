"""Save a GGUF model's tokenizer (and chat template) as a Hugging Face folder.

``python tokenizer.py REQUEST.json`` with ``{"gguf": FILE, "out": DIR}``; prints
``{"path": DIR, "chat_template": bool, "vocab": int}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformers import AutoTokenizer


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text())
    gguf = Path(request["gguf"])
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(request["out"])
    back = AutoTokenizer.from_pretrained(request["out"], local_files_only=True)
    print(json.dumps({"path": request["out"], "chat_template": bool(back.chat_template), "vocab": len(back)}))


if __name__ == "__main__":
    main()
