"""The server-rendered approval inbox of ``stateward serve`` (under ``/inbox``): signed sessions, CSRF
tokens on every form, a strict Content-Security-Policy and model text shown inert."""
