"""Compose Hydra overrides against verl's shipped trainer config and validate it as main_ppo does.

Run by tests/verl through .venv-verl's interpreter: ``python compose.py REQUEST.json`` where the
request is ``{"cases": [{"overrides": [...], "validate": bool, "select": [key, ...]}, ...]}``.
Prints one JSON line ``{"results": [...]}``, per case ``{"ok": true, "values": {key: value}}``
(each selected key of the composed config, resolved) or ``{"ok": false, "stage": "compose" |
"validate", "error": "..."}``.

Composing is Hydra's ``compose(config_name="ppo_trainer", overrides=...)`` on verl's own
``verl/trainer/config`` (what ``python -m verl.trainer.main_ppo key=value ...`` composes before
its ``main``); ``validate`` then runs verl's ``validate_config`` with ``need_reference_policy`` and
``need_critic``, the check ``main_ppo.main`` makes before it starts Ray.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import verl
from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import validate_config

CONFIG_DIR = str(Path(verl.__file__).parent / "trainer" / "config")


def compose_case(case: dict) -> dict:
    """One case: compose, optionally validate, read the selected keys."""
    try:
        with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
            cfg = compose(config_name="ppo_trainer", overrides=list(case["overrides"]))
    except (HydraException, OmegaConfBaseException) as err:  # ConfigCompositionException, OverrideParseException, ...
        return {"ok": False, "stage": "compose", "error": f"{type(err).__name__}: {err}"}
    if case.get("validate"):
        try:
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        except (AssertionError, ValueError, TypeError, KeyError, OmegaConfBaseException) as err:  # what its checks raise
            return {"ok": False, "stage": "validate", "error": f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=4)}"}
    wrapped = OmegaConf.create({k.replace(".", "/"): OmegaConf.select(cfg, k, throw_on_missing=False) for k in case.get("select", [])})
    values = {k.replace("/", "."): v for k, v in OmegaConf.to_container(wrapped, resolve=True).items()}
    return {"ok": True, "values": values}


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text())
    print(json.dumps({"results": [compose_case(c) for c in request["cases"]]}))


if __name__ == "__main__":
    main()
