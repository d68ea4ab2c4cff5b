"""Third-party web applications of the web suite, served on loopback inside a site process.

- ``django``: the Django admin (``django.contrib.admin`` over ``auth``) on SQLite, seeded
  with users and groups. Migrating takes seconds, so the migrated and seeded database is
  made once per Django version and seed code and kept in
  ``~/.cache/fidelity/web/django-<version>-<hash>.sqlite3``; each start copies it.
- ``sqlite-web``: Charles Leifer's sqlite-web (Flask) over a seeded inventory database.

Both run under :mod:`wsgiref` on an ephemeral port (see :mod:`fidelity.sandboxes.sites`).
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import os
import random
import shutil
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fidelity.sandboxes.images import cache_dir

ADMIN_USER = ("admin", "fidelity-admin")
"""Username and password of the Django admin's superuser."""

FIRST = ("Ada", "Bruno", "Chiara", "Dmitri", "Esther", "Farid", "Gwen", "Hiro", "Iris", "Joao")
LAST = ("Abara", "Berg", "Castillo", "Dunn", "Eze", "Fontaine", "Gupta", "Holm")
GROUPS = {
    "Editors": ("add_user", "change_user", "view_user"),
    "Auditors": ("view_user", "view_group", "view_logentry"),
    "Support": ("view_user", "change_user"),
}
JOINED = "2025-03-{day:02d} 09:30:00+00:00"

WsgiApp = Callable[..., Any]


def django_settings(database: Path) -> dict[str, Any]:
    """The settings of the loopback admin site (fixed secret, fast password hashing)."""
    return {
        "DEBUG": False,
        "SECRET_KEY": "fidelity-loopback-only-not-secret",
        "ALLOWED_HOSTS": ["127.0.0.1", "localhost"],
        "ROOT_URLCONF": __name__,
        "INSTALLED_APPS": [
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "django.contrib.staticfiles",
        ],
        "MIDDLEWARE": [
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        "TEMPLATES": [
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(database)}},
        "PASSWORD_HASHERS": ["django.contrib.auth.hashers.MD5PasswordHasher"],
        "USE_TZ": True,
        "TIME_ZONE": "UTC",
        "LANGUAGE_CODE": "en-us",
        "STATIC_URL": "/static/",
        "DEFAULT_AUTO_FIELD": "django.db.models.AutoField",
        "LOGGING_CONFIG": None,
    }


def django_app(root: Path) -> WsgiApp:
    """The Django admin as a WSGI app over a fresh copy of the cached, seeded database."""
    import django
    from django.conf import settings

    database = root / "admin.sqlite3"
    settings.configure(**django_settings(database))
    django.setup()
    _set_urls()
    template = _django_template()
    shutil.copyfile(template, database)
    from django.core.wsgi import get_wsgi_application

    app: WsgiApp = get_wsgi_application()
    return app


def _set_urls() -> None:
    """This module's ``urlpatterns`` (the ROOT_URLCONF): the admin at ``/``, its static files."""
    from django.contrib import admin
    from django.contrib.staticfiles.views import serve
    from django.urls import path, re_path

    globals()["urlpatterns"] = [
        re_path(r"^static/(?P<path>.*)$", serve, {"insecure": True}),
        path("", admin.site.urls),
    ]


def _django_template() -> Path:
    """The migrated, seeded database of this Django version (made once, atomically)."""
    import django

    code = inspect.getsource(seed_django) + repr(django_settings(Path("db")))
    digest = hashlib.sha256(code.encode()).hexdigest()[:12]
    target = cache_dir() / "web" / f"django-{django.get_version()}-{digest}.sqlite3"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    from django.core.management import call_command
    from django.db import connections

    handle, scratch = tempfile.mkstemp(suffix=".sqlite3", dir=target.parent)
    os.close(handle)
    database = connections["default"].settings_dict["NAME"]
    connections["default"].settings_dict["NAME"] = scratch
    try:
        call_command("migrate", verbosity=0, interactive=False)
        seed_django()
        connections["default"].close()
        os.replace(scratch, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(scratch)
        connections["default"].settings_dict["NAME"] = database
    return target


def seed_django(seed: int = 5) -> None:
    """A superuser, three groups with permissions and forty users (same seed, same rows)."""
    from django.contrib.auth.models import Group, Permission, User

    rng = random.Random(seed)
    admin = User.objects.create_superuser(ADMIN_USER[0], "admin@example.org", ADMIN_USER[1])
    admin.date_joined = JOINED.format(day=1)
    admin.save()
    groups = []
    for name, codenames in GROUPS.items():
        group = Group.objects.create(name=name)
        group.permissions.set(Permission.objects.filter(codename__in=codenames))
        groups.append(group)
    for number in range(40):
        first, last = FIRST[number % len(FIRST)], rng.choice(LAST)
        user = User.objects.create_user(
            f"{first}.{last}{number}".lower(),
            f"{first}.{last}{number}@example.org".lower(),
            "changeme-42",
            first_name=first,
            last_name=last,
            is_staff=rng.random() < 0.3,
            is_active=rng.random() < 0.85,
            date_joined=JOINED.format(day=1 + number % 28),
        )
        user.groups.set(rng.sample(groups, rng.randrange(0, 3)))


def build_inventory(path: Path, seed: int = 23) -> None:
    """The sqlite-web site's database: suppliers, parts and stock movements (seeded)."""
    rng = random.Random(seed)
    suppliers = ("Northwind Metals", "Baltic Fasteners", "Kestrel Plastics", "Orion Tooling")
    parts = ("hex bolt", "washer", "bearing", "gasket", "spring", "bracket", "rivet", "hinge")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("create table supplier (id integer primary key, name text not null, city text)")
        db.execute(
            "create table part (id integer primary key, sku text unique not null, name text, "
            "supplier_id integer references supplier(id), unit_price real, on_hand integer)"
        )
        db.execute(
            "create table movement (id integer primary key, part_id integer references part(id), "
            "quantity integer, reason text, day text)"
        )
        db.execute("create index movement_part on movement(part_id)")
        db.execute(
            "create view low_stock as select sku, name, on_hand from part where on_hand < 20"
        )
        cities = ("Gdansk", "Turku", "Porto", "Brno")
        for number, (name, city) in enumerate(zip(suppliers, cities, strict=True), 1):
            db.execute("insert into supplier values (?, ?, ?)", (number, name, city))
        for number in range(1, 49):
            db.execute(
                "insert into part values (?, ?, ?, ?, ?, ?)",
                (
                    number,
                    f"P-{1000 + number * 7}",
                    f"{rng.choice(parts)} M{rng.randrange(3, 13)}",
                    rng.randrange(1, len(suppliers) + 1),
                    rng.randrange(5, 900) / 100,
                    rng.randrange(0, 400),
                ),
            )
        for number in range(1, 81):
            db.execute(
                "insert into movement values (?, ?, ?, ?, ?)",
                (
                    number,
                    rng.randrange(1, 49),
                    rng.choice((-1, 1)) * rng.randrange(1, 60),
                    rng.choice(("received", "shipped", "returned", "scrapped")),
                    f"2025-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
                ),
            )
    stamp = 1_750_000_000  # a fixed modification time: sqlite-web shows it on its index
    os.utime(path, (stamp, stamp))


def sqlite_web_app(root: Path) -> WsgiApp:
    """sqlite-web (Flask) over a fresh seeded inventory database."""
    database = root / "inventory.db"
    build_inventory(database)
    from sqlite_web import sqlite_web

    sqlite_web.initialize_app([str(database)])
    app: WsgiApp = sqlite_web.app
    return app
