"""The vocabulary every layer shares; it imports nothing else of the package.

dispatch/ and backends/ both import from here, and backends/ never imports dispatch/:
- problem.py   ProblemKey (the frozen problem descriptor) and the device facts in it
- modes.py     schedule modes, their codes in every kernel, the free-vs-prefill rule
- records.py   the Table-record layout (schedule records)
- instance.py  Instance (a backend's kernel shape) and Reason (a failed rule, as data)
- geometry.py  head counts and page sizes the op's contract covers
- errors.py    every exception the op raises
- env.py       the only reader of MQA_LOGITS_MXFP4_* variables
- log.py       the package logger (MQA_LOGITS_MXFP4_LOG)
"""
