"""The tools around a run: benchmarks (bench*.py) against the peers (peers.py), the report, `plan`
and the scaling model (scaling_model.py, calibration.json), and the workloads they generate
(workloads.py, live_workload.py, tpch.py)."""
