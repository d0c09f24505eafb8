"""Signal handlers still run when their signal interrupts a guard's judge.

The wrapper ``signal.signal`` installs queues a handler whose signal arrived while sealed
code ran (its frame would have the judge's below it), and the doors run the queue once the
judge returned (pysb_guards._seal._run_pending). The escape corpus checks that such a
handler never sees a guard's frame; this checks that none is lost or run in the wrong
thread: every SIGINT sent while the main thread makes refused calls is handled, in the
main thread, with no frame.
"""

from __future__ import annotations

import guarded

PROGRAM = """
import os, signal, threading, _thread, time
seen = []
def handler(signum, frame):
    seen.append((signum, frame, threading.get_ident()))
signal.signal(signal.SIGINT, handler)
main = threading.get_ident()
sent = []
def pester():
    for _ in range(400):
        _thread.interrupt_main()
        sent.append(1)
        time.sleep(0.0005)
t = threading.Thread(target=pester)
t.start()
calls = 0
while t.is_alive():
    for p in ('/etc/shadow', '/etc/gshadow', '/root/x'):
        try:
            os.stat(p)  # refused: the files judge runs for each call
        except OSError:
            pass
        calls += 1
t.join()
os.stat('.')  # one more door after the last signal: the queue is empty after it
print('sent', len(sent))
print('calls', calls)
print('handled', len(seen))
print('queued', sum(1 for _, f, _ in seen if f is None))
print('threads', sorted({'main' if i == main else 'other' for _, _, i in seen}))
print('signums', sorted({s for s, _, _ in seen}))
"""


def test_handlers_of_signals_that_interrupt_a_judge_all_run_in_the_main_thread(
    tmp_path, python: str
) -> None:
    res = guarded.run(
        PROGRAM,
        imports=("os", "signal", "threading", "_thread", "time"),
        exposures=(guarded.expose(tmp_path),),
        api=(("allow", "threads"),),
        cwd=tmp_path,
        python=python,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    lines = dict(line.split(" ", 1) for line in res.stdout.strip().splitlines())
    assert int(lines["sent"]) == 400 and int(lines["calls"]) > 0, res.stdout
    # interrupt_main coalesces signals that arrive before the handler ran: at most one
    # handler call per signal. A handler run from the queue gets no frame (one run at once
    # gets the interrupted frame): queued ones must have run, in the main thread.
    assert 0 < int(lines["handled"]) <= 400, res.stdout
    assert int(lines["queued"]) > 0, res.stdout
    assert lines["threads"] == "['main']", res.stdout
    assert lines["signums"] == "[2]", res.stdout


LOST_SIGNALS = """
import os, random, signal, time
# CPython's test_signal.StressTest.test_stress_delivery_simultaneous, shortened: SIGUSR2
# arrives inside the guarded os.kill (a door), SIGALRM wherever the timer fires
seen = []
def handler(signum, frame):
    seen.append(signum)
signal.signal(signal.SIGUSR2, handler)
signal.signal(signal.SIGALRM, handler)
expected = late = 0
for _ in range(2000):
    signal.setitimer(signal.ITIMER_REAL, 1e-6 + random.random() * 1e-5)
    os.kill(os.getpid(), signal.SIGUSR2)
    expected += 2
    deadline = time.monotonic() + 0.5
    while len(seen) < expected and time.monotonic() < deadline:
        time.sleep(0.0005)  # no guarded call, no audit event: only the interpreter runs
    while len(seen) < expected:  # waited in vain: one more door runs what it queued
        late += 1
        os.getpid()
        os.stat('.')
print('late', late)
print('handled', len(seen), 'of', expected)
"""


def test_no_signal_is_lost_when_it_arrives_inside_a_door(python: str) -> None:
    """A handler whose signal arrives inside a guard (here the door of ``os.kill``, which
    delivers SIGUSR2 to its own process before it returns) runs as soon as the program's
    code runs again, not at the next guarded call, which may never come: the program
    waits for it in a loop of unguarded calls (it waited in vain: CPython's
    test_signal.test_stress_delivery_simultaneous timed out on 3.13). None runs twice."""
    res = guarded.run(LOST_SIGNALS, api=(("allow", "*"),), python=python, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.split() == ["late", "0", "handled", "4000", "of", "4000"], res.stdout
