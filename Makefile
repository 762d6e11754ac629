# Shortcuts for course.py (which works without make, on any OS with Python 3.10+).
PY ?= python3

.PHONY: lab test regen doctor lint student bench
lab:      ; $(PY) course.py lab
test:     ; $(PY) course.py test
regen:    ; $(PY) course.py regen
doctor:   ; $(PY) course.py doctor
student:  ; $(PY) course.py student student
lint:     ; .venv/bin/ruff check .
bench:    ; $(PY) benchmarks/run.py $(BENCH)
