import json
from pathlib import Path

try:
    text = Path("/app/hello.txt").read_text().strip()
except OSError:
    text = ""
exact = float(text == "Hello, Ada!")
mentions = float("Ada" in text)
Path("/logs/verifier/reward.json").write_text(json.dumps({"reward": exact, "mentions": mentions}))
