// agent/teardown/exit_record.hpp with its real writers: ctrun's sitecustomize.py and libctrun_exit_note.so in
// <build>/python, run by a plain python3 (no ctrun) against a file the agent's side made; and the file's life
// (made, read, removed, swept).
#include "agent/teardown/exit_record.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/support/child_process.hpp"
#include "tests/support/files.hpp"

namespace ctrun::agent::teardown {
namespace {

namespace fs = std::filesystem;

struct PythonRun {
  int status = -1;  // wait status
  std::string out;
  std::string err;
};

// python3 -c CODE with <build>/python first on PYTHONPATH and `env` on top of this process's environment.
PythonRun run_python(const std::string& code, const std::map<std::string, std::string>& env) {
  const std::string dir = ctrun::test::fresh_dir("exit_record_py");
  std::ofstream(dir + "/prog.py") << code;
  // Appended piece by piece (GCC 12's -Wrestrict misreads `" " + std::string(...)`).
  std::string cmd = "env PYTHONPATH=";
  cmd.append(CTRUN_PYTHON_DIR);
  for (const auto& [k, v] : env) cmd.append(" ").append(k).append("='").append(v).append("'");
  cmd.append(" ").append(CTRUN_TORCH_PYTHON).append(" ").append(dir).append("/prog.py >").append(dir);
  cmd.append("/out 2>").append(dir).append("/err");
  PythonRun r;
  r.status = std::system(cmd.c_str());
  r.out = ctrun::test::read_file(dir + "/out");
  r.err = ctrun::test::read_file(dir + "/err");
  return r;
}

TEST(ExitRecord, MadeEmptyReadAndRemoved) {
  const std::string root = ctrun::test::fresh_dir("exit_record_file");
  std::string path;
  {
    ExitRecords records(root, ::getpid(), 3, 2);
    path = records.path();
    EXPECT_EQ(path, root + "/ctrun-exit-" + std::to_string(::getpid()) + "-3");
    EXPECT_EQ(fs::file_size(path), 2 * kSlotBytes);
    EXPECT_FALSE(records.read(0).ended);
    EXPECT_FALSE(records.read(1).ended);
    EXPECT_FALSE(records.read(2).ended);  // no such rank
    const auto env = records.env_for(1);
    EXPECT_EQ(env.at("CTRUN_EXIT_RECORD"), path);
    EXPECT_EQ(env.at("CTRUN_EXIT_SLOT"), "1");
  }
  EXPECT_FALSE(fs::exists(path));
}

TEST(ExitRecord, CannotBeMadeSaysWhere) {
  try {
    ExitRecords records("/nonexistent-dir-of-ctrun-tests", ::getpid(), 1, 1);
    FAIL() << "made in a directory that does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir-of-ctrun-tests/ctrun-exit-"), std::string::npos);
  }
}

TEST(ExitRecord, StaleFilesOfDeadAgentsAreSwept) {
  const std::string root = ctrun::test::fresh_dir("exit_record_sweep");
  // A pid that is gone: a child that has exited and been reaped.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string stale = root + "/ctrun-exit-" + std::to_string(dead) + "-1";
  const std::string mine = root + "/ctrun-exit-" + std::to_string(::getpid()) + "-1";
  const std::string other = root + "/ctrun-progress-" + std::to_string(dead) + "-1";
  for (const auto& p : {stale, mine, other}) std::ofstream(p) << "x";
  const auto removed = sweep_stale_exit_records(root);
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], stale);
  EXPECT_TRUE(fs::exists(mine));
  EXPECT_TRUE(fs::exists(other));  // not an exit record
}

// The program's end as python3 writes it: pid, status, flags, the time, and exit()'s status from the C note.
struct Case {
  const char* what;
  const char* program;
  int exit_status;  // of python3
  int status;       // the slot's
  std::uint32_t flags;
};

TEST(ExitRecord, WrittenByTheWorkersOwnPython) {
  const Case cases[] = {
      {"its last line ran", "x = 1\n", 0, 0, 0},
      {"sys.exit(0)", "import sys\nsys.exit(0)\n", 0, 0, kSystemExit},
      {"sys.exit(5)", "import sys\nsys.exit(5)\n", 5, 5, kSystemExit},
      {"raise SystemExit(3)", "raise SystemExit(3)\n", 3, 3, kSystemExit},
      {"exit('bye')", "exit('bye')\n", 1, 1, kSystemExit},
      {"sys.exit(256)", "import sys\nsys.exit(256)\n", 0, 0, kSystemExit},
      {"an uncaught exception", "raise ValueError('no')\n", 1, 1, kUncaught},
      {"a caught sys.exit(2), then its end", "import sys\ntry:\n  sys.exit(2)\nexcept SystemExit:\n  pass\n", 0, 2,
       kSystemExit},
      {"sys.exit(7) in a thread: not the program's",
       "import sys, threading\n"
       "t = threading.Thread(target=sys.exit, args=(7,))\nt.start()\nt.join()\n",
       0, 0, 0},
  };
  const std::string root = ctrun::test::fresh_dir("exit_record_writers");
  for (const Case& c : cases) {
    ExitRecords records(root, ::getpid(), 1, 2);
    const PythonRun r = run_python(c.program, records.env_for(1));
    ASSERT_TRUE(WIFEXITED(r.status)) << c.what;
    EXPECT_EQ(WEXITSTATUS(r.status), c.exit_status) << c.what << "\n" << r.err;
    EXPECT_FALSE(records.read(0).ended) << c.what << ": rank 0's slot is not its";
    const ExitRecord rec = records.read(1);
    EXPECT_TRUE(rec.ended) << c.what << "\n" << r.err;
    EXPECT_GT(rec.pid, 0) << c.what;
    EXPECT_EQ(rec.status, c.status) << c.what;
    EXPECT_EQ(rec.flags, c.flags) << c.what;
    EXPECT_GT(rec.ended_ns, 0) << c.what;
    EXPECT_TRUE(rec.exit_called) << c.what << ": the C note was not armed";
    EXPECT_EQ(rec.exit_status & 0xFF, c.exit_status) << c.what;
    EXPECT_EQ(r.err.find("ctrun:"), std::string::npos) << c.what << ": " << r.err;
    EXPECT_EQ(r.err.find("Exception in thread"), std::string::npos) << c.what << ": " << r.err;
  }
}

// What a program sees of SystemExit and sys.exit is Python's own, with the end recorded or not.
TEST(ExitRecord, SystemExitBehavesAsPythons) {
  const std::string program = R"(import pickle, sys, threading
def show(what, f):
    try:
        f()
        print(what, 'returned')
    except SystemExit as e:
        print(what, repr(e), e.code, e.args, type(e).__name__, type(e) is SystemExit, isinstance(e, SystemExit),
              issubclass(type(e), BaseException), type(pickle.loads(pickle.dumps(e))) is SystemExit)
show('sys.exit()', lambda: sys.exit())
show('sys.exit(None)', lambda: sys.exit(None))
show('sys.exit(2)', lambda: sys.exit(2))
show('sys.exit(())', lambda: sys.exit(()))
show('sys.exit((1, 2))', lambda: sys.exit((1, 2)))
show('sys.exit("msg")', lambda: sys.exit("msg"))
def bare():
    raise SystemExit
show('raise SystemExit', bare)
show('exit(4)', lambda: exit(4))
try:
    sys.exit(1, 2)
except TypeError:
    print('sys.exit(1, 2): TypeError')
print(SystemExit.__name__, SystemExit.__qualname__, SystemExit.__module__, repr(SystemExit))
t = threading.Thread(target=sys.exit, args=(3,))
t.start()
t.join()
sys.exit('the end')
)";
  const std::string root = ctrun::test::fresh_dir("exit_record_semantics");
  ExitRecords records(root, ::getpid(), 1, 1);
  const PythonRun plain = run_python(program, {});
  const PythonRun recorded = run_python(program, records.env_for(0));
  EXPECT_EQ(recorded.out, plain.out);
  EXPECT_EQ(recorded.err, plain.err);  // "the end", and nothing from the thread's sys.exit
  EXPECT_EQ(recorded.status, plain.status);
  EXPECT_EQ(plain.err, "the end\n");
  const ExitRecord rec = records.read(0);
  EXPECT_TRUE(rec.ended);
  EXPECT_EQ(rec.status, 1);
  EXPECT_EQ(rec.flags, kSystemExit);
}

// A crash before exit() leaves exit_called out; the end is recorded and the files flushed before.
TEST(ExitRecord, CrashBeforeExitLeavesTheStatusOut) {
  const std::string root = ctrun::test::fresh_dir("exit_record_crash");
  ExitRecords records(root, ::getpid(), 1, 1);
  const std::string file = root + "/unclosed.txt";
  const PythonRun r = run_python("import os\nf = open('" + file +
                                     "', 'w')\nf.write('complete\\n')\n"
                                     "class _Crash:\n  def __del__(self):\n    os.abort()\n_crash = _Crash()\n",
                                 records.env_for(0));
  // system() reports the shell's view: 128+6 for a child killed by SIGABRT, or the signal itself.
  EXPECT_TRUE((WIFEXITED(r.status) && WEXITSTATUS(r.status) == 128 + SIGABRT) ||
              (WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT))
      << r.status << "\n"
      << r.err;
  const ExitRecord rec = records.read(0);
  EXPECT_TRUE(rec.ended);
  EXPECT_EQ(rec.status, 0);
  EXPECT_FALSE(rec.exit_called);
  EXPECT_EQ(ctrun::test::read_file(file), "complete\n") << "the file the program left open was not flushed";
}

// The variables are taken out of the environment: the program's own Python children do not write the slot.
TEST(ExitRecord, ChildrenOfTheWorkerDoNotRecord) {
  const std::string root = ctrun::test::fresh_dir("exit_record_children");
  ExitRecords records(root, ::getpid(), 1, 1);
  const PythonRun r = run_python(
      "import os, subprocess, sys\n"
      "print('CTRUN_EXIT_RECORD' in os.environ, 'CTRUN_EXIT_SLOT' in os.environ)\n"
      "child = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, "
      "text=True)\n"
      "print(child.stdout.strip())\n"
      "pid = os.fork()\n"
      "if pid == 0:\n  sys.exit(9)\n"
      "os.waitpid(pid, 0)\n",
      records.env_for(0));
  ASSERT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << r.err;
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "False False");
  const ExitRecord rec = records.read(0);
  EXPECT_TRUE(rec.ended);
  EXPECT_EQ(rec.status, 0) << "a forked child's sys.exit(9) or a Python child wrote the worker's slot";
  EXPECT_EQ(rec.exit_status, 0);
}

}  // namespace
}  // namespace ctrun::agent::teardown
