"""Fakes for the parts of the world tests cannot have: npu-smi, vendor endpoints."""
