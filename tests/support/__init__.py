"""What the tests share besides fixtures (those stay in tests/conftest.py), one module per concern.

Every test module imports it the same way, ``from support.<module> import <name>``: pytest puts tests/
on ``sys.path`` before it loads tests/conftest.py (its default "prepend" import mode), so ``support`` is
found from every test folder, and from conftest.py itself, and is loaded once.
"""
