"""Short native kernels called from several Python threads at once give each thread its own answer.

A short kernel runs through a held call (`ops.native_eager.launch_arrays`): its arguments are written into an int64
array, then the trampoline reads them. With one array per kernel, a thread switch between the writes and the call
let another thread's call overwrite them: a kernel read a dead array (a segfault) or wrote another thread's result.
The run happens in a child process, so a crash fails this test instead of killing the test worker."""
from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import jitorch
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    wrong, errors = [0], []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            x = jitorch.from_numpy(rng.standard_normal((8, 8)).astype(np.float32))
            y = jitorch.from_numpy(rng.standard_normal((8, 8)).astype(np.float32))
            calls = [lambda: x.sigmoid(), lambda: y.lerp(x, 0.3), lambda: x.softmax(-1), lambda: x.clamp(-0.5, 0.5),
                     lambda: y.add(x, alpha=0.5)]
            wants = [c().numpy().copy() for c in calls]
            for _ in range(1500):
                for c, want in zip(calls, wants):
                    if not np.array_equal(c().numpy(), want):
                        wrong[0] += 1
        except Exception as e:
            errors.append(repr(e))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(wrong[0], errors)
""")


def test_threads_calling_short_kernels_each_get_their_own_results():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the child crashed ({done.returncode}): {done.stderr[-2000:]}"
    assert done.stdout.split()[0] == "0" and done.stdout.strip().endswith("[]"), done.stdout
