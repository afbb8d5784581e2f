"""What never leaves the node in clear: secrets in the config, in URLs and in captured command lines
are replaced before anything logs, sends or stores them.
"""
