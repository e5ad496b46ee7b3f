"""The run folder: what is in it (folder.py), who holds it (lock.py), which folders rlft made (markers.py), how a
run gets one (prepare.py, with the command's options.py) and what a resume may change (resume_keys.py)."""
