/* ctrun's exit note (agent/teardown/exit_record.hpp): the first exit handler of a Python worker whose program has
 * ended. ctrun's sitecustomize.py loads this library with ctypes and calls ctrun_exit_note_arm() from its last
 * atexit handler, once the program's end is in the worker's slot; glibc then runs note() first when exit() is
 * called (exit handlers run in the reverse order of their registration: libtorch's static destructors, registered
 * at its import, come after), and it adds the status exit() was called with. A native crash before exit() (in the
 * interpreter's finalization) leaves the status out: the agent then goes by what Python recorded. Only libc. */
#define _DEFAULT_SOURCE /* on_exit */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

static int note_fd = -1;
static off_t note_offset;

static void note(int status, void *arg) {
  (void)arg;
  const int32_t value = status;
  const uint32_t called = 1;
  /* The status first, then the flag the agent reads first (exit_record.hpp: exit_status at 28, exit_called at 24). */
  if (pwrite(note_fd, &value, sizeof value, note_offset + 28) == (ssize_t)sizeof value)
    (void)!pwrite(note_fd, &called, sizeof called, note_offset + 24);
}

/* fd: the attempt's exit-record file, open for writing (kept open until the process ends); offset: the worker's slot
 * (an int: sitecustomize.py may call this through _ctypes.call_function, which passes Python ints as C ints).
 * 0 when the handler is registered. */
__attribute__((visibility("default"))) int ctrun_exit_note_arm(int fd, int offset) {
  note_fd = fd;
  note_offset = (off_t)offset;
  return on_exit(note, NULL);
}
