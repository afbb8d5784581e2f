"""`npu-watchdog doctor`: the preflight check and environment record of a training node.

Layout: pure check functions (`versions`, `devices`, `envcheck`) turn gathered facts into
`CheckResult`s; `gather` does all the I/O (npu-smi, version files, the training interpreter);
`report` renders, records and compares. The daemon never imports torch: questions about the
training environment are asked by running small scripts (`scripts/`) in the *training* interpreter.
"""
