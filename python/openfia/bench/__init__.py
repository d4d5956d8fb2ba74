"""openfia's benchmark: openfia against PyTorch compositions of the same attention, on
model-shaped workloads, with the machine's limits. Run `python -m openfia.bench --help` (also
`python -m openfia bench ...`).

Modules: case_list (the case-line format and the model workloads file), fia_workloads and
sparse_workloads (the workloads as tensors and PyTorch peers), runner (check, then time one
workload), timing, machine (limits), report (table and roofline), cli.
"""
