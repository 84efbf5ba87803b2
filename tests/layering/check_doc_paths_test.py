#!/usr/bin/env python3
"""scripts/check_doc_paths.py on small planted trees: paths that exist pass (plain, brace lists, globs, a module
named without its extension, a folder, `path:LINE`); a moved file named in backticks or bare fails, naming the
document's line."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "check_doc_paths.py")
TREE = ["agent/base/event_log.hpp", "agent/base/event_log.cpp", "comm/algorithms/all_reduce_shm.cpp"]


def run(doc):
    with tempfile.TemporaryDirectory() as root:
        for path in TREE:
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            open(os.path.join(root, path), "w").close()
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "docs", "map.md"), "w") as f:
            f.write(doc)
        p = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout


class CheckDocPaths(unittest.TestCase):
    def test_existing_paths_pass(self):
        doc = ("`agent/base/event_log.{hpp,cpp}` `comm/algorithms/*_shm.cpp` `agent/base/event_log` `agent/base/`\n"
               "see agent/base/event_log.cpp:12 and `agent/base/event_log.hpp::EventLog`.\n")
        self.assertEqual(run(doc), (0, ""))

    def test_a_moved_file_in_backticks_fails(self):
        code, out = run("intro\nthe log: `agent/event_log.cpp`\n")
        self.assertEqual(code, 1)
        self.assertIn("docs/map.md:2: `agent/event_log.cpp` names agent/event_log.cpp, which does not exist", out)

    def test_a_moved_file_written_bare_fails(self):
        code, out = run("the log lives in agent/event_log.hpp.\n")
        self.assertEqual(code, 1)
        self.assertIn("docs/map.md:1:", out)

    def test_one_missing_alternative_of_a_brace_list_fails(self):
        code, out = run("`agent/base/event_log.{hpp,cpp,py}`\n")
        self.assertEqual(code, 1)
        self.assertIn("names agent/base/event_log.py", out)


if __name__ == "__main__":
    unittest.main()
