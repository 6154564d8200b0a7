"""Table mode's schedule record: RECORD_INTS int32 (32 bytes) per program of the scoring launch.

Fields, in order (units: each row group's set-up units, then one a key tile, numbered as
worksplit/rules.py states): 0 u_begin (first unit of the program), 1 u_end (one past its last
unit), 2 first_seq (the sequence holding u_begin), 3 units_before (units of the sequences before
first_seq); 4-7 are zero, reserved. backends/opus/csrc/args.h repeats RECORD_INTS as kRecordInts
(checked by tests/test_structure.py); the Triton and FlyDSL kernels take it from here.
"""

RECORD_INTS = 8
RECORD_FIELDS = ("u_begin", "u_end", "first_seq", "units_before")  # the rest of a record is zero
