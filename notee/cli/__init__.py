"""The ``notee`` command, the top rank (5): local commands that start processes or act on the stores
(``main``) and remote commands that go through the HTTP API with the SDK (``remote``)."""
