"""`python -m mqa_logits_mxfp4 ...`: the same command line as `mqa-logits-mxfp4`."""

from .cli import main

if __name__ == "__main__":  # spawned isa workers import this module under another name
    raise SystemExit(main())
