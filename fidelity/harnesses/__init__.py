"""The field's own harnesses, used where a trajectory names one of their environments.

Each module here leaves the naming, building and grading to the harness's own package
(imported inside functions, so that ``fidelity`` starts quickly): fidelity only runs the
result in its sandboxes.
"""
