"""The parts of the probe scheduler (watchdog.scheduler): the phased trigger, a round and the
thread that runs a probe's rounds, and the bookkeeping of completed rounds."""
