"""Stand-in for componentize-py's `componentize_py_types`: raising Err(message) fails a call."""


class Err(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value
