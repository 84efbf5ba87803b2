"""Minimal stand-in for the `expecttest` package (not in Debian), enough for torch.testing._internal.common_utils.

The real package rewrites expected strings in test sources when ACCEPT is set; here ACCEPT stays False and
assertExpectedInline is a plain comparison, which is all that PyTorch's distributed tests need.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    longMessage = True

    def assertExpectedInline(self, actual, expect, skip=0):  # noqa: N802 (upstream name)
        self.assertMultiLineEqual(str(expect).strip(), str(actual).strip())

    def assertExpectedRaisesInline(self, exc_type, callable, expect, *args, **kwargs):  # noqa: N802
        try:
            callable(*args, **kwargs)
        except exc_type as e:
            self.assertExpectedInline(str(e), expect)
            return
        self.fail(f"did not raise {exc_type.__name__}")
