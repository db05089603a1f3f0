"""How ``jitorch.ops.<namespace>.<name>`` finds ``jitorch.library`` operators, and a custom op in an exported
program loaded by a fresh process (torch's ``torch.ops`` and ``torch.export.load`` as the reference).

Each test uses its own namespace (the registries are process-wide).
"""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import jitorch
from jitorch.library import _registry

LIBS = (jitorch, torch)


def test_unknown_names_are_attribute_errors():
    for name in ("tabel", "_x", "a.b", "pytestmark", "__wrapped__", "jt_test_lookup_never"):
        assert getattr(jitorch.ops, name, None) is None, name
        with pytest.raises(AttributeError, match=f"module 'jitorch.ops' has no attribute {name!r}"):
            getattr(jitorch.ops, name)
    with pytest.raises(ImportError):
        from jitorch.ops import tabel  # noqa: F401 - a typo is not a namespace
    # torch.ops hands out a namespace for any name, so its AttributeError comes one step later
    with pytest.raises(AttributeError, match="'_OpNamespace' 'jt_test_lookup_never' object has no attribute 'f'"):
        torch.ops.jt_test_lookup_never.f  # noqa: B018 - the lookup is the test
    from jitorch.ops import linalg_lapack  # the package's own modules stay reachable

    assert linalg_lapack.__name__ == "jitorch.ops.linalg_lapack"


def test_namespaces_of_libraries_ops_and_pending_kernels():
    fragment = jitorch.library.Library("jt_test_lookup_frag", "FRAGMENT")  # nothing defined yet
    assert jitorch.ops.jt_test_lookup_frag.__name__ == "jitorch.ops.jt_test_lookup_frag"
    assert torch.ops.jt_test_lookup_frag.__name__ == "torch.ops.jt_test_lookup_frag"
    impl = jitorch.library.Library("jt_test_lookup_impl", "IMPL")
    impl.impl("f", lambda x: x + 1, "CPU")  # a kernel waiting for its definition
    assert "jt_test_lookup_impl::f" in _registry.PENDING
    assert getattr(jitorch.ops, "jt_test_lookup_impl", None) is not None

    @jitorch.library.custom_op("jt_test_lookup_op::twice", mutates_args=())
    def twice(x: jitorch.Tensor) -> jitorch.Tensor:
        return x * 2

    assert float(jitorch.ops.jt_test_lookup_op.twice(jitorch.ones(1))) == 2.0
    fragment._destroy()
    impl._destroy()


def test_packet_is_cached_on_its_namespace_until_its_library_goes(monkeypatch):
    for lib in LIBS:
        keep = lib.library.Library("jt_test_lookup_cache", "FRAGMENT")
        keep.define("f(Tensor x) -> Tensor")
        keep.impl("f", lambda x: x * 3, "CPU")
        ns = lib.ops.jt_test_lookup_cache
        packet = ns.f
        assert packet is ns.f and "f" in vars(ns)  # an attribute of the namespace, as torch's
        if lib is jitorch:
            def scan(qualname):
                raise AssertionError(f"registry scanned again for {qualname}")

            with monkeypatch.context() as m:
                m.setattr(_registry, "has_qualname", scan)
                assert ns.f is packet
                np.testing.assert_array_equal(ns.f(lib.ones(2)).numpy(), [3.0, 3.0])
        keep._destroy()
        assert "f" not in vars(ns)
        with pytest.raises(AttributeError, match="'_OpNamespace' 'jt_test_lookup_cache' object has no attribute 'f'"):
            ns.f  # noqa: B018 - the lookup is the test


# -- export.load of a program calling a custom op ----------------------------------------------------------------------
DEFS = textwrap.dedent('''
    import numpy as np


    def define(T, ns):
        @T.library.custom_op(f"{ns}::numpy_sin", mutates_args=())
        def numpy_sin(x: T.Tensor) -> T.Tensor:
            return T.from_numpy(np.sin(x.numpy()))

        @numpy_sin.register_fake
        def _(x):
            return T.empty_like(x)

        class Net(T.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = T.nn.Linear(3, 2)

            def forward(self, x):
                return numpy_sin(self.lin(x)) * 2
        return Net
''')

LOAD = textwrap.dedent('''
    import json, sys
    import numpy as np
    import jitorch
    if sys.argv[2] == "define":
        sys.path.insert(0, sys.argv[3])
        from jt_lookup_defs import define
        define(jitorch, "jt_test_lookup_load")
    try:
        m = jitorch.export.load(sys.argv[1]).module()
        print(json.dumps(m(jitorch.tensor(np.array(json.loads(sys.argv[4]), dtype=np.float32))).tolist()))
    except Exception as e:
        print(json.dumps([type(e).__name__, str(e)]))
''')


def test_load_in_a_fresh_process_needs_the_op_defined(tmp_path):
    (tmp_path / "jt_lookup_defs.py").write_text(DEFS)
    sys.path.insert(0, str(tmp_path))
    try:
        from jt_lookup_defs import define
    finally:
        sys.path.remove(str(tmp_path))
    torch.manual_seed(0)
    tm, jm = define(torch, "jt_test_lookup_load")(), define(jitorch, "jt_test_lookup_load")()
    jm.load_state_dict({k: jitorch.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    path = tmp_path / "prog.pt2"
    jitorch.export.save(jitorch.export.export(jm, (jitorch.tensor(x),)), path)
    want = torch.export.export(tm, (torch.tensor(x),)).module()(torch.tensor(x)).detach().numpy()

    def load(mode):
        out = subprocess.run([sys.executable, "-c", LOAD, str(path), mode, str(tmp_path), json.dumps(x.tolist())],
                             capture_output=True, text=True, timeout=120, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    np.testing.assert_allclose(np.array(load("define"), dtype=np.float32), want, rtol=1e-5, atol=1e-6)
    kind, msg = load("bare")
    assert kind == "SerializeError" and "jt_test_lookup_load::numpy_sin" in msg
    assert "define custom op jt_test_lookup_load::numpy_sin (import the module that defines it) before " \
        "export.load" in msg
