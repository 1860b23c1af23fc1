"""Test-session set-up: the calibrated peaks of `profile` (llmcalc.profiling.peak_cache) go to a folder of this
session, never to the user's cache, so that a test neither reads a peak another machine state measured nor leaves
one behind."""

import os
import tempfile

os.environ["LLMCALC_CACHE_DIR"] = tempfile.mkdtemp(prefix="llmcalc-test-cache-")
