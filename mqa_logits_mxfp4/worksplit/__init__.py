"""The work split every backend follows, and the one kernel that writes Table records.

- rules.py    the split in plain Python: the statement every backend's kernels transcribe
- records.py  build_records(): Table records on the device, for any backend's instance
- kernel.py   the Triton kernel behind it (imported on first use: TRITON_INTERPRET is read then)

It imports only core/; backends/ and dispatch/ import it.
"""
