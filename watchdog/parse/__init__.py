"""Pure parsers of text that trainers and the kernel write (heartbeat files, flight recorder rings,
`/dev/kmsg` records, step numbers, HCCL timeouts from an environment, numbers from untrusted text):
no I/O, tested on plain bytes.
"""
