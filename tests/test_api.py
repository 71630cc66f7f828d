import subprocess
import sys

import ratchet


def test_the_public_api_is_exactly_all():
    public = {name for name in vars(ratchet) if not name.startswith("_")}
    modules = {name for name in public if type(getattr(ratchet, name)).__name__ == "module"}
    assert public - modules == set(ratchet.__all__)
    assert all(hasattr(ratchet, name) for name in ratchet.__all__)


def test_importing_ratchet_does_not_load_heavy_dependencies():
    code = (
        "import sys, ratchet; print(sorted({'torch', 'transformers', 'peft'} & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"


def test_the_command_line_starts_without_models_or_charts():
    code = (
        "import sys, ratchet.cli; heavy = {'torch', 'transformers', 'peft', 'matplotlib'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert loaded.stdout.strip() == "[]"
