"""`tether chaos`: run real workers under real faults and check the contract.

Modules: ``checker`` (history + final state -> verdict per invariant),
``driver`` (workers, producer, faults, drain, report), ``faults`` (the
injectors), ``proxy`` (a TCP proxy for partitions), ``pgserver`` (a scratch
PostgreSQL the harness may restart), ``workerproc`` (the worker under test).
"""
