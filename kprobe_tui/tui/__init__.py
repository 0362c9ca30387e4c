"""The Textual app on top of the cores: ``app.run_app(args)`` starts it, ``app.KprobeTui`` is the app.

Screens ask to go somewhere with ``navigation`` messages the app handles; work that blocks runs through
``work.Background``, never on the UI thread; outside text reaches a widget through ``plain``.
"""
