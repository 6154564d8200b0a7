"""Table mode's schedule record: RECORD_INTS int32 (32 bytes) per program of the scoring launch.

Fields, in order (units: each row group's set-up units, then one a key tile, numbered as
worksplit/rules.py states): 0 u_begin (first unit of the program), 1 u_end (one past its last
unit), 2 first_seq (the sequence holding u_begin), 3 units_before (units of the sequences before
first_seq), 4-7 first_seq's rows and key tiles as worksplit/rules.py's seq_units reads them:
first_qa, first_qb (its rows [qa, qb)), first_lo, first_span (its groups' tiles [lo, lo + span));
all four zero when first_seq is past the sequences. Fields 4-7 save a kernel that starts its walk
from the record the walk's first reads (query_start_loc, then row_ends); a kernel that reads them
clamps them as it clamps those reads. backends/opus/csrc/args.h repeats RECORD_INTS as kRecordInts
(checked by tests/test_structure.py); the Triton and FlyDSL kernels take it from here.
"""

RECORD_INTS = 8
RECORD_FIELDS = ("u_begin", "u_end", "first_seq", "units_before", "first_qa", "first_qb", "first_lo", "first_span")
