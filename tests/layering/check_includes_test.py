#!/usr/bin/env python3
"""scripts/check_includes.py on small planted trees: clean passes; a layer including one above, two files of one
component including each other, two sub-folders including each other, a room including the agent's top floor, and
the agent's ground (agent/base/) including a room each fail, naming the include."""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "check_includes.py")


def run(files):
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        p = subprocess.run([sys.executable, SCRIPT, root], capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout


CLEAN = {
    "common/log.hpp": "#pragma once\n",
    "store/store.hpp": '#include "common/log.hpp"\n',
    "rendezvous/handler.hpp": '#include "store/store.hpp"\n',
    "agent/base/launch_config.hpp": '#include "rendezvous/handler.hpp"\n',
    "agent/logs/tee.hpp": '#include "agent/base/launch_config.hpp"\n',
    "agent/process/group.cpp": '#include "agent/logs/tee.hpp"\n#include "agent/process/group.hpp"\n',
    "agent/process/group.hpp": '#include "agent/base/launch_config.hpp"\n',
    "agent/agent.cpp": '#include "agent/process/group.hpp"\n#include "agent/base/launch_config.hpp"\n',
    "comm/comm.hpp": '#include "store/store.hpp"\n',
}


class CheckIncludes(unittest.TestCase):
    def test_clean_tree_passes(self):
        self.assertEqual(run(CLEAN), (0, ""))

    def test_a_layer_including_one_above_fails(self):
        code, out = run({**CLEAN, "store/server.cpp": '#include "rendezvous/handler.hpp"\n'})
        self.assertEqual(code, 1)
        self.assertIn("store/server.cpp:1: store/ includes rendezvous/handler.hpp, a layer above it", out)

    def test_comm_may_not_include_the_agent(self):
        code, out = run({**CLEAN, "comm/init.cpp": '#include "agent/base/launch_config.hpp"\n'})
        self.assertEqual(code, 1)
        self.assertIn("comm/ includes agent/base/launch_config.hpp", out)

    def test_two_files_including_each_other_fail(self):
        code, out = run({**CLEAN, "agent/config/cli.cpp": '#include "agent/builder.hpp"\n',
                         "agent/builder.hpp": '#include "agent/config/cli.hpp"\n', "agent/config/cli.hpp": ""})
        self.assertEqual(code, 1)
        self.assertIn("agent/config/cli.cpp:1: includes agent/builder.hpp, which includes back", out)

    def test_sub_folders_including_each_other_fail(self):
        code, out = run({**CLEAN, "agent/logs/streams.cpp": '#include "agent/process/spawn.hpp"\n',
                         "agent/process/spawn.hpp": ""})
        self.assertEqual(code, 1)
        self.assertIn("agent/logs/ includes agent/process/spawn.hpp, and agent/process/ includes agent/logs/ back", out)

    def test_a_room_including_the_top_floor_fails(self):
        code, out = run({**CLEAN, "agent/logs/tee.cpp": '#include "agent/agent.hpp"\n', "agent/agent.hpp": ""})
        self.assertEqual(code, 1)
        self.assertIn("agent/logs/tee.cpp:1: agent/logs/ includes agent/agent.hpp, a file of agent/'s top floor", out)

    def test_the_ground_including_a_room_fails(self):
        code, out = run({**CLEAN, "agent/base/launch_config.cpp": '#include "agent/logs/tee.hpp"\n'})
        self.assertEqual(code, 1)
        self.assertIn("agent/base/launch_config.cpp:1: agent/base/ includes agent/logs/tee.hpp; the ground includes "
                      "no room", out)


if __name__ == "__main__":
    unittest.main()
