"""Helpers shared by several test suites (fake model server, bundled conversations).

Test modules import them as ``support.<module>``: pytest puts ``tests/`` on ``sys.path``
because ``tests/conftest.py`` lives in a folder without ``__init__.py``.
"""
