"""Datasets at farm scale: plan a dataset spec into shards, run them on a process pool, Slurm or Ray,
follow their status, finalize (dataset manifest, hash, QA, leakage audit) and replay one sample.

A plan folder holds plan.json, bundles/<scenario>/ (one bundle per scenario, written by the exporter),
status/<shard>.json (written by each shard's worker), logs/<shard>.log and, after finalize,
dataset.json, splits/<split>.txt and qa_summary.json.
"""
