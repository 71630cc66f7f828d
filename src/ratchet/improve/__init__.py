"""The improvement loop: practice, hindsight, levers, the gate, the run directory."""
