"""Worker-side roles: join modules (pure state machines) and the thin MPI loops around them."""
