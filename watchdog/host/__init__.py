"""Reading this node: a process's `/proc` stat, opening the files of ranks safely, and running an
external command under a hard timeout.
"""
