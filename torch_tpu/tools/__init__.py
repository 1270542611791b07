"""Developer tools: the OpInfo conformance harness and the coverage report.

    python -m torch_tpu.tools.coverage [--quick] [--ops NAME ...] [--json PATH]
"""
