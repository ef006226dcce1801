"""`kompute-dml`: main.py (the command and its subcommands), common.py (what they share),
run.py (`kompute-dml run`: an ONNX model through the backend)."""
