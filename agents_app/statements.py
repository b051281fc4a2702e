"""Every hand-written SQL statement of the agents app: the SQL layer under the models.

The engine's per-turn reads and writes are written out here, their text made once per database,
because building and compiling a queryset per call cost more CPU than running the statement
(docs/decisions.md). The text comes from the models' metadata (tables, columns, each field's
conversions), so what is read converts as the ORM's iterator converts it, and both databases
(SQLite and PostgreSQL) run the same text. No model is imported: callers pass model classes or
``Columns`` in. ``update``, ``insert``, ``insert_unless_taken``, ``insert_many``, ``upsert`` and
``lock_row`` write known rows; the named statements at the end (one function each) are the other
shapes. Anything else stays a queryset. Identifiers are quoted names from the metadata; every
value is a parameter. ``together`` joins writes into one statement on PostgreSQL, where a turn's
time goes to round trips.
"""

import contextlib
import datetime
import functools
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError, connections, models, router, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import Field, JSONField, Model, signals
from django.db.models.constants import OnConflict
from django.utils.asyncio import async_unsafe

from .protocol import codec

Converter = Callable[[Any, Any, BaseDatabaseWrapper], Any]


@functools.cache
def _alias(model: type[Model]) -> str:
    return router.db_for_write(model)


def connection_for(model: type[Model]) -> BaseDatabaseWrapper:
    """The connection the ORM would write ``model``'s rows with (reads go there too: one database)."""
    return connections[_alias(model)]


@async_unsafe
def _cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """The connection's cursor for this module's statements, made once per database connection and
    kept open: a cursor made and closed around each statement, as ``connection.cursor()`` does,
    cost more than running the statement (bench/README.md, "Fifteenth round"). What
    ``connection.cursor()`` checks is checked at every use (no running event loop, the connection's
    thread, its health), and a new connection, or a change of ``queries_logged`` (a test capturing
    queries), gets a new cursor. Every statement here reads all of its rows, so a kept cursor
    never holds one unfinished (on SQLite, a read snapshot left open).

    On PostgreSQL with prepared statements on (the connection's ``prepare_threshold``, settings
    ``DB_PREPARE_THRESHOLD``) it binds parameters on the server, so psycopg prepares each of these
    fixed texts once per connection and PostgreSQL stops parsing and planning them every turn
    (docs/decisions.md#postgresql-on-the-turn-path). The ORM's own queries keep Django's
    client-side binding."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    kept: CursorWrapper | None = getattr(connection, "_agents_statements_cursor", None)
    if (kept is None or kept.cursor.connection is not connection.connection
            or isinstance(kept, CursorDebugWrapper) != connection.queries_logged):
        with connection.wrap_database_errors:
            kept = connection._prepare_cursor(_new_cursor(connection))
        connection._agents_statements_cursor = kept  # type: ignore[attr-defined]
    return kept


def _new_cursor(connection: BaseDatabaseWrapper) -> Any:
    if connection.vendor != "postgresql" or connection.settings_dict["OPTIONS"].get("prepare_threshold") is None:
        return connection.create_cursor()
    from django.db.backends.postgresql.base import ServerBindingCursor

    return ServerBindingCursor(connection.connection)


class _Deferred:
    """The writes of a ``together`` block that wait to go in front of the next statement."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.connection = connection
        # (text, parameters, quoted table name) of each write, in order.
        self.writes: list[tuple[str, list[Any], str]] = []

    def add(self, sql: str, params: list[Any], name: str) -> None:
        """Let a write of table ``name`` wait, after sending those of a table it names: the parts
        of one statement all read the database as it was before it, so a write must not share one
        with a write of a table it reads (a reply's position counts the rows before it, an upsert
        finds the row)."""
        if any(waiting in sql for _, _, waiting in self.writes):
            self.flush()
        self.writes.append((sql, params, name))

    def take_into(self, sql: str, params: Sequence[Any]) -> tuple[str, list[Any]]:
        """``sql``, a write, with the waiting writes in front, when it names none of their tables;
        else the writes go first, on their own."""
        if any(name in sql for _, _, name in self.writes):
            self.flush()
            return sql, list(params)
        writes, self.writes = self.writes, []
        return _joined(writes, sql, params)

    def flush(self) -> None:
        """Send the waiting writes, as one statement."""
        if not self.writes:
            return
        writes, self.writes = self.writes, []
        *before, (sql, params, _) = writes
        _cursor(self.connection).execute(*_joined(before, sql, params))

    def before_other_queries(self, execute: Callable[..., Any], sql: str, params: Any, many: bool,
                             context: dict[str, Any]) -> Any:
        """The connection's execute wrapper during the block: a query this module did not make (an
        ORM query, a savepoint) sends the waiting writes first, so it sees them. A rollback to a
        savepoint drops them instead: the savepoint's own statement sent those made before it."""
        if sql.startswith("ROLLBACK TO SAVEPOINT"):
            self.writes = []
        else:
            self.flush()
        return execute(sql, params, many, context)


_together: ContextVar[_Deferred | None] = ContextVar("agents_app_statements_together", default=None)


@contextlib.contextmanager
def together(model: type[Model]) -> Iterator[None]:
    """Inside the caller's transaction, on PostgreSQL: writes whose outcome the caller does not read
    (``insert_many`` of one batch, ``upsert``, ``Write.write``) wait, and go with the block's next
    write of this module as data-modifying ``WITH`` clauses in front of it, or at the block's end:
    one round trip for several (docs/decisions.md#postgresql-on-the-turn-path). Everything else
    sends them first: a query this module did not make (an execute wrapper), a read, a statement
    or write that names a table they write. So what goes together is writes of different tables
    that nothing in between reads; PostgreSQL runs the parts of one statement in no set order, so
    they must not depend on that order either. A waiting write's error surfaces with the statement
    it went with. A block left by an exception sends its waiting writes all the same, as SQLite
    has made them; when the transaction cannot take them (a failed statement), it is marked for
    rollback. Elsewhere (SQLite) it changes nothing."""
    connection = connection_for(model)
    if not connection.in_atomic_block:
        raise RuntimeError("statements.together runs inside a transaction (transaction.atomic)")
    if connection.vendor != "postgresql" or _together.get() is not None:
        yield
        return
    deferred = _Deferred(connection)
    token = _together.set(deferred)
    try:
        with connection.execute_wrapper(deferred.before_other_queries):
            try:
                yield
            except BaseException:
                try:
                    deferred.flush()
                except DatabaseError:
                    transaction.set_rollback(True, using=connection.alias)
                raise
            deferred.flush()
    finally:
        _together.reset(token)


def _joined(writes: Sequence[tuple[str, list[Any], str]], sql: str, params: Sequence[Any]) -> tuple[str, list[Any]]:
    """``sql`` after the ``writes`` as data-modifying ``WITH`` clauses (joined to a ``WITH`` it
    has), and the parameters in the text's order."""
    if not writes:
        return sql, list(params)
    values = [value for _, write_params, _ in writes for value in write_params]
    clauses = ", ".join(f"deferred_{index} AS ({text})" for index, (text, _, _) in enumerate(writes))
    opening = next((words for words in ("WITH RECURSIVE ", "WITH ") if sql.startswith(words)), None)
    text = f"{opening}{clauses}, {sql[len(opening):]}" if opening else f"WITH {clauses} {sql}"
    return text, [*values, *params]


def _execute(cursor: CursorWrapper, sql: str, params: Sequence[Any], *, read: bool = False) -> None:
    """``cursor.execute``, with the writes waiting in a ``together`` block in front, or sent first.
    A ``read`` is never joined: it would see neither their rows nor, when one of them waits for a
    row lock, what committed meanwhile."""
    deferred = _together.get()
    if deferred is not None and deferred.writes and deferred.connection is cursor.db:
        if read:
            deferred.flush()
        else:
            sql, params = deferred.take_into(sql, params)
    cursor.execute(sql, params)


def _write(connection: BaseDatabaseWrapper, model: type[Model], sql: str, params: list[Any]) -> None:
    """A write whose outcome the caller does not read: it waits inside a ``together`` block."""
    deferred = _together.get()
    if deferred is not None and deferred.connection is connection:
        deferred.add(sql, params, table(model, connection))
        return
    _write_now(connection, model, sql, params)


def _write_now(connection: BaseDatabaseWrapper, model: type[Model], sql: str, params: list[Any]) -> None:
    _execute(_cursor(connection), sql, params)


def table(model: type[Model], connection: BaseDatabaseWrapper) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _column(model: type[Model], name: str, connection: BaseDatabaseWrapper) -> str:
    meta = model._meta
    return connection.ops.quote_name(meta.pk.column if name == "pk" else meta.get_field(name).column)


@functools.cache
def _update_sql(model: type[Model], columns: tuple[str, ...], conditions: tuple[str, ...], alias: str) -> str:
    connection = connections[alias]
    assignments = ", ".join(f"{_column(model, name, connection)} = %s" for name in columns)
    where = " AND ".join(f"{_column(model, name, connection)} = %s" for name in conditions)
    # Identifiers from the model's metadata, quoted; every value is a parameter.
    return f"UPDATE {table(model, connection)} SET {assignments} WHERE {where}"  # noqa: S608


def _prepared(model: type[Model], name: str, value: Any, connection: BaseDatabaseWrapper) -> Any:
    if hasattr(value, "resolve_expression"):
        raise TypeError(f"statements.update takes plain values, not {value!r}: use a queryset for expressions")
    field = model._meta.pk if name == "pk" else model._meta.get_field(name)
    return _db_value(field, value, connection)


def field_values(model: type[Model], **values: Any) -> list[Any]:
    """The parameters ``values`` (field name: value) are written as, for a statement that compares
    stored columns with them (``queue_user_and_transcript``)."""
    connection = connection_for(model)
    return [_prepared(model, name, value, connection) for name, value in values.items()]


# Field classes whose ``get_db_prep_save`` gives the driver a value of this exact type unchanged
# (their calls only check or convert other types). Exact classes: a subclass may convert.
_AS_IS: dict[type[Field], type] = {
    models.CharField: str, models.TextField: str, models.SlugField: str, models.BooleanField: bool,
    models.IntegerField: int, models.BigIntegerField: int, models.SmallIntegerField: int,
    models.PositiveIntegerField: int, models.PositiveBigIntegerField: int, models.PositiveSmallIntegerField: int,
    models.AutoField: int, models.BigAutoField: int,
}


@functools.cache
def _plain_kind(field: Field) -> type | str | None:
    """What ``_db_value`` knows of ``field``: the type it passes as it is, "datetime", "json", or None."""
    kind = type(field)
    if kind in (models.ForeignKey, models.OneToOneField):
        return _plain_kind(field.target_field)
    if kind is models.DateTimeField:
        return "datetime"
    if kind is JSONField and field.encoder is None:
        return "json"
    return _AS_IS.get(kind)


def _db_value(field: Field, value: Any, connection: BaseDatabaseWrapper) -> Any:
    """``field.get_db_prep_save(value, connection)``: the same parameter, with the values a turn
    writes (strings, integers, aware UTC datetimes, dicts and lists of JSON columns) made here
    rather than through the field's and the backend's chain of calls, which took about 6 % of a
    turn's CPU (bench/README.md, "Twenty-first round"). A JSON value is written as
    ``protocol.codec`` writes frames (compact; a float that is not a number as ``null``, which
    neither database can store as JSON anyway). Anything else goes to the field."""
    kind = _plain_kind(field)
    if kind is not None:
        if value is None or type(value) is kind:
            return value
        vendor = connection.vendor
        if kind == "datetime" and type(value) is datetime.datetime and value.tzinfo is datetime.UTC:
            if vendor == "postgresql":
                return value
            if vendor == "sqlite" and connection.timezone is datetime.UTC:
                return str(value.replace(tzinfo=None))
        elif kind == "json" and type(value) in (dict, list):
            if vendor == "sqlite":
                return codec.dumps(value)
            if vendor == "postgresql":
                from django.db.backends.postgresql.psycopg_any import Jsonb

                return Jsonb(value, dumps=codec.dumps)
    return field.get_db_prep_save(value, connection)


def update(model: type[Model], where: dict[str, Any], **values: Any) -> int:
    """``model.objects.filter(**where).update(**values)``, where every filter is an equality and
    every value a plain one (no ``F()``); returns how many rows changed.

    As ``QuerySet.update``: no signals, no ``auto_now``, no ``save()``.
    """
    if not where:
        raise ValueError("statements.update changes rows it names: give it a filter")
    connection = connection_for(model)
    sql = _update_sql(model, tuple(values), tuple(where), connection.alias)
    params = [_prepared(model, name, value, connection) for name, value in (*values.items(), *where.items())]
    cursor = _cursor(connection)
    _execute(cursor, sql, params)
    return int(cursor.rowcount)


def update_returning(model: type[Model], where: dict[str, Any], returned: "Columns | Returned", **values: Any
                     ) -> tuple[Any, ...] | None:
    """``update`` of one row that reads back its ``returned`` columns as they are after it (in their
    order, unconverted: ``returned.values`` or ``returned.instance`` converts them), or the
    expressions of a ``Returned``; None when no row matched. One statement where a write and a read
    took two."""
    if not where:
        raise ValueError("statements.update_returning changes a row it names: give it a filter")
    connection = connection_for(model)
    sql = _update_returning_sql(model, tuple(values), tuple(where), returned, connection.alias)
    params = [_prepared(model, name, value, connection) for name, value in (*values.items(), *where.items())]
    cursor = _cursor(connection)
    _execute(cursor, sql, params)
    return _only(cursor.fetchall())


@dataclass(frozen=True)
class Returned:
    """What an ``update_returning`` reads back other than columns of the row: the SQL that
    ``build(connection)`` writes, with no parameter, which names the written row's columns by the
    table's quoted name (``table``)."""

    build: Callable[[BaseDatabaseWrapper], str]


@functools.cache
def _update_returning_sql(model: type[Model], columns: tuple[str, ...], conditions: tuple[str, ...],
                          returned: "Columns | Returned", alias: str) -> str:
    connection = connections[alias]
    if isinstance(returned, Returned):
        returning = returned.build(connection)
    else:
        returning = ", ".join(connection.ops.quote_name(field.column) for field in returned.fields)
    return f"{_update_sql(model, columns, conditions, alias)} RETURNING {returning}"


def lock_row(model: type[Model], pk: Any, column: str) -> None:
    """Take the row's write lock for the rest of the transaction (``SET column = column``): writers
    of the same row wait for it on PostgreSQL; on SQLite every write waits for the database's one."""
    connection = connection_for(model)
    sql = _lock_sql(model, column, connection.alias)
    _execute(_cursor(connection), sql, [model._meta.pk.get_db_prep_value(pk, connection)])


@functools.cache
def _lock_sql(model: type[Model], name: str, alias: str) -> str:
    connection = connections[alias]
    column, pk = _column(model, name, connection), _column(model, "pk", connection)
    # Identifiers from the model's metadata, quoted; the value is a parameter.
    return f"UPDATE {table(model, connection)} SET {column} = {column} WHERE {pk} = %s"  # noqa: S608


def _insert_fields(model: type[Model], with_pk: bool) -> tuple[Field, ...]:
    meta = model._meta
    return tuple(f for f in meta.local_concrete_fields if with_pk or f is not meta.auto_field)


@functools.cache
def _insert_sql(model: type[Model], with_pk: bool, rows: int, returning: bool, alias: str, *,
                unless_taken: bool = False) -> str:
    connection = connections[alias]
    fields = _insert_fields(model, with_pk)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    values = ", ".join([f"({', '.join(['%s'] * len(fields))})"] * rows)
    # Identifiers from the model's metadata, quoted; every value is a parameter.
    sql = f"INSERT INTO {table(model, connection)} ({columns}) VALUES {values}"  # noqa: S608
    if unless_taken:
        sql += " ON CONFLICT DO NOTHING"
    if returning:
        returned, _params = connection.ops.return_insert_columns([model._meta.pk])
        sql += f" {returned}"
    return sql


def _check_no_receivers(model: type[Model]) -> None:
    if signals.pre_save.has_listeners(model) or signals.post_save.has_listeners(model):
        raise TypeError(f"{model.__name__} has save signal receivers: save() it, statements.insert sends none")


def _row_params(obj: Model, fields: Sequence[Field], connection: BaseDatabaseWrapper) -> list[Any]:
    return [_db_value(f, f.pre_save(obj, add=True), connection) for f in fields]


def insert(obj: Model) -> None:
    """``obj.save()`` of a new row, as the ORM's INSERT makes it (each field's ``pre_save``:
    defaults, ``auto_now_add``; its ``get_db_prep_save``), then its primary key read back.

    For models with no parents, no save signal receivers and no ``save()`` of their own to run.
    """
    model = type(obj)
    _check_no_receivers(model)
    connection = connection_for(model)
    with_pk = obj.pk is not None
    returning = not with_pk and connection.features.can_return_columns_from_insert
    sql = _insert_sql(model, with_pk, 1, returning, connection.alias)
    cursor = _cursor(connection)
    _execute(cursor, sql, _row_params(obj, _insert_fields(model, with_pk), connection))
    if not with_pk:
        pk = cursor.fetchall()[0][0] if returning else connection.ops.last_insert_id(
            cursor, model._meta.db_table, model._meta.pk.column)
        obj.pk = pk
    obj._state.adding, obj._state.db = False, connection.alias


def insert_linked(parent: Model, child: Model, link: str) -> None:
    """``insert`` of ``parent``, then of ``child``, whose foreign key ``link`` points at it (both new,
    their keys made by the database). On PostgreSQL one statement, a round trip fewer: the
    parent's ``INSERT … RETURNING`` as a ``WITH`` clause whose key the child's ``VALUES`` read in a
    scalar subquery (in ``VALUES`` each parameter takes its column's type, as in ``insert``; the
    foreign key is checked at the statement's end, when both rows are there); the writes waiting
    in a ``together`` block go in front, as for ``insert``. Elsewhere, two ``insert`` calls."""
    connection = connection_for(type(parent))
    if connection.vendor != "postgresql":
        insert(parent)
        setattr(child, link, parent)
        insert(child)
        return
    parent_model, child_model = type(parent), type(child)
    _check_no_receivers(parent_model)
    _check_no_receivers(child_model)
    if parent.pk is not None or child.pk is not None:
        raise ValueError("statements.insert_linked inserts new rows whose keys the database makes")
    key = child_model._meta.get_field(link)
    fields = [field for field in _insert_fields(child_model, False) if field is not key]
    sql = _linked_insert_sql(parent_model, child_model, link, connection.alias)
    cursor = _cursor(connection)
    _execute(cursor, sql, [*_row_params(parent, _insert_fields(parent_model, False), connection),
                           *_row_params(child, fields, connection)])
    child_pk, parent_pk = cursor.fetchall()[0]
    parent.pk = parent_pk
    setattr(child, link, parent)
    child.pk = child_pk
    for obj in (parent, child):
        obj._state.adding, obj._state.db = False, connection.alias


@functools.cache
def _linked_insert_sql(parent_model: type[Model], child_model: type[Model], link: str, alias: str) -> str:
    connection = connections[alias]
    key = child_model._meta.get_field(link)
    fields = _insert_fields(child_model, False)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    parent_key = connection.ops.quote_name(parent_model._meta.pk.column)
    linked = f"(SELECT {parent_key} FROM linked)"  # noqa: S608 - a quoted identifier
    values = ", ".join(linked if f is key else "%s" for f in fields)
    returned = f"{_column(child_model, 'pk', connection)}, {connection.ops.quote_name(key.column)}"
    # Identifiers from the models' metadata, quoted; every value is a parameter.
    return (f"WITH linked AS ({_insert_sql(parent_model, False, 1, True, alias)}) "  # noqa: S608
            f"INSERT INTO {table(child_model, connection)} ({columns}) VALUES ({values}) RETURNING {returned}")


def insert_unless_taken(obj: Model) -> bool:
    """``obj.save()`` of a new row (``insert``), unless a unique constraint finds its values taken:
    then nothing is written and False is returned (``INSERT … ON CONFLICT DO NOTHING``). One
    statement where a savepoint, the insert and the savepoint's end made three, compiled each time.

    Sends ``pre_save``, and ``post_save`` (``created``) for a row written, as ``save()`` does.
    """
    model = type(obj)
    connection = connection_for(model)
    signals.pre_save.send(sender=model, instance=obj, raw=False, using=connection.alias, update_fields=None)
    sql = _insert_sql(model, False, 1, True, connection.alias, unless_taken=True)
    cursor = _cursor(connection)
    _execute(cursor, sql, _row_params(obj, _insert_fields(model, False), connection))
    inserted = cursor.fetchall()
    if not inserted:
        return False
    obj.pk = inserted[0][0]
    obj._state.adding, obj._state.db = False, connection.alias
    signals.post_save.send(sender=model, instance=obj, created=True, update_fields=None, raw=False,
                           using=connection.alias)
    return True


def insert_many(objs: Sequence[Model], batch_size: int | None = None) -> None:
    """``bulk_create(objs, batch_size)`` of new rows of one model; their primary keys are not read
    back (``insert`` says what is written)."""
    if not objs:
        return
    model = type(objs[0])
    _check_no_receivers(model)
    connection = connection_for(model)
    fields = _insert_fields(model, with_pk=False)
    size = max(1, min(batch_size or len(objs), connection.ops.bulk_batch_size(list(fields), objs)))
    # Only one batch waits in a ``together`` block: batches are kept short for the driver's sake,
    # which binds a statement's parameters holding the GIL.
    write = _write if size >= len(objs) else _write_now
    for start in range(0, len(objs), size):
        batch = objs[start:start + size]
        params = [value for obj in batch for value in _row_params(obj, fields, connection)]
        write(connection, model, _insert_sql(model, False, len(batch), False, connection.alias), params)
    for obj in objs:
        obj._state.adding, obj._state.db = False, connection.alias


def update_then_insert(model: type[Model], where: dict[str, Any], values: dict[str, Any],
                       objs: Sequence[Model]) -> None:
    """``update(model, where, **values)`` and, when it changed a row, ``insert_many(objs)``, in one
    transaction, or in the caller's. On PostgreSQL that is one statement (the ``UPDATE`` in a
    ``WITH`` whose ``INSERT`` runs only if it returned a row): one round trip where the two
    statements, ``BEGIN`` and ``COMMIT`` took four (docs/decisions.md#postgresql-on-the-turn-path).
    SQLite has no data-modifying ``WITH``; its statements are in-process calls anyway."""
    connection = connection_for(model)
    if not objs or connection.vendor != "postgresql":
        # No savepoint inside a caller's transaction: a failure fails that too.
        with transaction.atomic(using=connection.alias, savepoint=False):
            if update(model, where, **values):
                insert_many(objs)
        return
    inserted = type(objs[0])
    _check_no_receivers(inserted)
    fields = _insert_fields(inserted, with_pk=False)
    params = [_prepared(model, name, value, connection) for name, value in (*values.items(), *where.items())]
    params += [value for obj in objs for value in _row_params(obj, fields, connection)]
    sql = _update_then_insert_sql(model, tuple(values), tuple(where), inserted, len(objs), connection.alias)
    _execute(_cursor(connection), sql, params)
    for obj in objs:
        obj._state.adding, obj._state.db = False, connection.alias


@functools.cache
def _update_then_insert_sql(model: type[Model], columns: tuple[str, ...], conditions: tuple[str, ...],
                            inserted: type[Model], rows: int, alias: str) -> str:
    connection = connections[alias]
    fields = _insert_fields(inserted, with_pk=False)
    names = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    # Typed, as a VALUES list's columns are not the table's: each value cast to its column's type.
    row = f"({', '.join(f'CAST(%s AS {f.db_type(connection)})' for f in fields)})"
    # Identifiers and types from the model's metadata, quoted; every value is a parameter.
    return (f"WITH u AS ({_update_sql(model, columns, conditions, alias)} RETURNING 1) "  # noqa: S608
            f"INSERT INTO {table(inserted, connection)} ({names}) SELECT * FROM (VALUES {', '.join([row] * rows)}) v "
            f"WHERE EXISTS (SELECT 1 FROM u)")


@functools.cache
def _upsert_sql(model: type[Model], unique: str, update: tuple[str, ...], alias: str) -> str:
    connection = connections[alias]
    meta = model._meta
    suffix = connection.ops.on_conflict_suffix_sql(
        list(_insert_fields(model, True)), OnConflict.UPDATE,
        [meta.get_field(name).column for name in update], [meta.get_field(unique).column],
    )
    return f"{_insert_sql(model, True, 1, False, alias)} {suffix}"


def upsert(obj: Model, unique: str, update: Sequence[str]) -> None:
    """``bulk_create([obj], update_conflicts=True, unique_fields=[unique], update_fields=update)``:
    the row inserted, or, where ``unique``'s value is taken, that row's ``update`` columns set
    (every field's ``pre_save`` runs, so ``auto_now`` columns are written either way).

    ``obj`` has its primary key (``insert`` says what else it must be).
    """
    model = type(obj)
    _check_no_receivers(model)
    connection = connection_for(model)
    _write(connection, model, _upsert_sql(model, unique, tuple(update), connection.alias),
           _row_params(obj, _insert_fields(model, True), connection))
    obj._state.adding, obj._state.db = False, connection.alias


class Statement:
    """A statement over ``model``'s table, its text written by ``build(connection)`` once per database."""

    def __init__(self, model: type[Model], build: Callable[[BaseDatabaseWrapper], str]) -> None:
        self.model = model
        self.build = build
        self._sql: dict[str, str] = {}

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connection_for(self.model)

    def _text(self, connection: BaseDatabaseWrapper) -> str:
        sql = self._sql.get(connection.alias)
        if sql is None:
            sql = self._sql[connection.alias] = self.build(connection)
        return sql


class Write(Statement):
    """An ``INSERT`` or ``UPDATE`` with a shape ``update`` and ``insert`` do not write (a value
    computed by a subquery, a conflict clause); its parameters are values of the model's fields
    ``params``, prepared as the ORM prepares them (``Field.get_db_prep_save``)."""

    def __init__(self, model: type[Model], build: Callable[[BaseDatabaseWrapper], str],
                 params: tuple[str, ...]) -> None:
        super().__init__(model, build)
        self.params = params

    def write(self, *values: Any) -> None:
        """Run it with ``values`` (one per name in ``params``); in a ``together`` block it waits."""
        connection = self.connection
        prepared = [_prepared(self.model, name, value, connection)
                    for name, value in zip(self.params, values, strict=True)]
        _write(connection, self.model, self._text(connection), prepared)


class Select(Statement):
    """A ``SELECT`` over ``model``'s table (its values, already plain, are the parameters)."""

    def rows(self, *params: Any) -> list[tuple[Any, ...]]:
        connection = self.connection
        cursor = _cursor(connection)
        _execute(cursor, self._text(connection), params, read=True)
        return cursor.fetchall()

    def row(self, *params: Any) -> tuple[Any, ...] | None:
        """The first row, of a statement that reads one at most."""
        return _only(self.rows(*params))


def _only(rows: list[tuple[Any, ...]]) -> tuple[Any, ...] | None:
    return rows[0] if rows else None


@dataclass(frozen=True)
class Columns:
    """Columns of ``model`` in a ``SELECT`` under table alias ``alias``: the fields ``names``
    (attribute or field names), or every concrete field."""

    model: type[Model]
    alias: str
    names: tuple[str, ...] = ()

    @functools.cached_property
    def fields(self) -> tuple[Field, ...]:
        if self.names:
            return tuple(self.model._meta.get_field(name) for name in self.names)
        return tuple(self.model._meta.concrete_fields)

    def __len__(self) -> int:
        return len(self.fields)

    def bound(self, connection: BaseDatabaseWrapper) -> "BoundColumns":
        """These columns as SQL text for ``connection``'s database."""
        return BoundColumns(self, connection)

    def values(self, row: Sequence[Any], start: int, connection: BaseDatabaseWrapper) -> list[Any]:
        """The Python values in ``row[start:start + len(self)]``, converted as the ORM converts them."""
        return _convert(list(row[start:start + len(self.fields)]), _converters(self, connection.alias), connection)

    def converted(self, rows: Sequence[Sequence[Any]], connection: BaseDatabaseWrapper) -> list[list[Any]]:
        """``values`` of each row (the columns from the first on)."""
        converters = _converters(self, connection.alias)
        return [_convert(list(row), converters, connection) for row in rows]

    def instance(self, row: Sequence[Any], start: int, connection: BaseDatabaseWrapper) -> Model | None:
        """The instance in ``row[start:start + len(self)]`` (the fields not among ``names``
        deferred); None for a LEFT JOIN that found no row."""
        if row[start + self._pk_index] is None:
            return None
        values = self.values(row, start, connection)
        if self._model_order is not None:
            values = [values[index] for index in self._model_order]
        return self.model.from_db(connection.alias, self._attnames, values)

    @functools.cached_property
    def _model_order(self) -> list[int] | None:
        """The indexes of ``fields`` in the model's order, which ``Model.from_db`` reads values in;
        None when they are in it already (every concrete field: the per-turn reads)."""
        position = {field: index for index, field in enumerate(self.model._meta.concrete_fields)}
        order = sorted(range(len(self.fields)), key=lambda index: position[self.fields[index]])
        return None if order == list(range(len(self.fields))) else order

    @functools.cached_property
    def _attnames(self) -> list[str]:
        order = self._model_order or range(len(self.fields))
        return [self.fields[index].attname for index in order]

    @functools.cached_property
    def _pk_index(self) -> int:
        return self.fields.index(self.model._meta.pk)


@dataclass(frozen=True)
class BoundColumns:
    """``Columns`` as SQL text: ``select`` (``t."id", t."status", …`` in the order ``Columns.instance``
    reads them), ``table`` (``"table" t``), and called with a field name, that column
    (``t."column"``; ``"pk"`` works)."""

    columns: Columns
    connection: BaseDatabaseWrapper

    def __call__(self, name: str) -> str:
        return f"{self.columns.alias}.{_column(self.columns.model, name, self.connection)}"

    @property
    def select(self) -> str:
        quote = self.connection.ops.quote_name
        return ", ".join(f"{self.columns.alias}.{quote(field.column)}" for field in self.columns.fields)

    @property
    def table(self) -> str:
        return f"{table(self.columns.model, self.connection)} {self.columns.alias}"


def _convert(values: list[Any], converters: list[tuple[int, list[Converter], Any]],
             connection: BaseDatabaseWrapper) -> list[Any]:
    for index, field_converters, expression in converters:
        value = values[index]
        for convert in field_converters:
            value = convert(value, expression, connection)
        values[index] = value
    return values


@functools.cache
def _converters(columns: Columns, alias: str) -> list[tuple[int, list[Converter], Any]]:
    """Per column, what the ORM's compiler applies to a value read from database ``alias``
    (a ``JSONField``'s read by ``_json_reader``)."""
    connection = connections[alias]
    found = []
    for index, field in enumerate(columns.fields):
        expression = field.get_col(columns.model._meta.db_table)
        converters = [*connection.ops.get_db_converters(expression),
                      *(_json_reader(field, connection) if isinstance(field, JSONField)
                        else field.get_db_converters(connection))]
        if converters:
            found.append((index, converters, expression))
    return found


# The C scanner that ``json.loads`` runs after its own checks, called on a stored text directly.
_scan_json = json.JSONDecoder().scan_once


def _json_reader(field: JSONField, connection: BaseDatabaseWrapper) -> list[Converter]:
    """``JSONField.from_db_value``, with a text that is one JSON value and nothing else (every text
    this project stores) read by the scanner alone: about half of ``json.loads``'s time for a
    stored message (bench/README.md, "Fifteenth round"), the transcript's every row twice a turn.
    Anything else (a custom decoder, no text, whitespace around it, a text that is not JSON) goes
    to Django's converter, which gives the same value or the same error as before."""
    converters = field.get_db_converters(connection)
    if field.decoder is not None or converters != [field.from_db_value]:
        return converters
    from_db_value = field.from_db_value

    def read(value: Any, expression: Any, db: BaseDatabaseWrapper) -> Any:
        if type(value) is str:
            try:
                result, end = _scan_json(value, 0)
            except (StopIteration, ValueError):
                pass
            else:
                if end == len(value):
                    return result
        return from_db_value(value, expression, db)

    return [read]


# Named statements: each a function of the model classes (or ``Columns``) it reads or writes,
# returning the statement; callers keep it (``functools.cache``: one per set of arguments).


def _choice(value: str) -> str:
    """A choice of a model field (a status), written into the text rather than sent as a parameter.
    SQLite compares a parameter that a partial index's condition names (the one running turn per
    instance: ``status = 'running'``) with that condition when it plans, and then plans the
    statement again at every execution, since another value might change the plan: 26 against 3
    µs for the end of a turn's look at the queue (docs/decisions.md#the-statements-layer). Only a
    code's constant of letters and underscores is written so."""
    if not re.fullmatch(r"[a-z_]+", value):
        raise ValueError(f"not a choice constant: {value!r}")
    return f"'{value}'"


@functools.cache
def row_by_pk(columns: Columns) -> Select:
    """``columns`` of the row with a primary key; parameter: the key (as stored)."""

    def build(connection: BaseDatabaseWrapper) -> str:
        c = columns.bound(connection)
        return f"SELECT {c.select} FROM {c.table} WHERE {c('pk')} = %s"  # noqa: S608

    return Select(columns.model, build)


@functools.cache
def instance_queue_state(instance: type[Model]) -> Select:
    """An agent instance's (generation, overlap sequence); parameter: its pk."""

    def build(connection: BaseDatabaseWrapper) -> str:
        i = Columns(instance, "i").bound(connection)
        return f"SELECT {i('generation')}, {i('overlap_sequence')} FROM {i.table} WHERE {i('pk')} = %s"  # noqa: S608

    return Select(instance, build)


@functools.cache
def instance_at(instance: Columns, user: Columns, owned: bool) -> Select:
    """A top-level agent instance by address (``instance``'s columns) and its owner's (``user``'s,
    NULLs: none); parameters: the slug, the name and, ``owned``, the owner's pk (else it has none).
    A partial unique constraint makes the address name one row at most."""

    def build(connection: BaseDatabaseWrapper) -> str:
        i, u = instance.bound(connection), user.bound(connection)
        owner = f"{i('owner')} = %s" if owned else f"{i('owner')} IS NULL"
        return (f"SELECT {i.select}, {u.select} FROM {i.table} LEFT JOIN {u.table} ON {u('pk')} = {i('owner')} "  # noqa: S608
                f"WHERE {i('slug')} = %s AND {i('name')} = %s AND {i('parent')} IS NULL AND {owner}")

    return Select(instance.model, build)


@functools.cache
def queued_head(turn: Columns, user: Columns, instance: type[Model], status: str) -> Select:
    """An instance's next turn of a ``status`` (by priority, then oldest): ``turn``'s columns, its
    ``user``'s (NULLs: none), the instance's generation and overlap sequence; parameter: the
    instance pk."""

    def build(connection: BaseDatabaseWrapper) -> str:
        t, u, i = turn.bound(connection), user.bound(connection), Columns(instance, "i").bound(connection)
        return (
            f"SELECT {t.select}, {u.select}, {i('generation')}, {i('overlap_sequence')} "  # noqa: S608
            f"FROM {t.table} JOIN {i.table} ON {i('id')} = {t('instance')} "
            f"LEFT JOIN {u.table} ON {u('pk')} = {t('user')} "
            f"WHERE {t('instance')} = %s AND {t('status')} = {_choice(status)} "
            f"ORDER BY {t('priority')} DESC, {t('id')} ASC LIMIT 1"
        )

    return Select(turn.model, build)


@functools.cache
def queue_user_and_transcript(turn: type[Model], owned: type[Model], context: type[Model], message: Columns) -> Select:
    """What an admission reads once it holds the instance's row, in one statement: the newest
    generation among the instance's turns of two statuses (NULL: none), how many turns of those
    statuses a user has, whether the instance has rows of ``owned`` (a model with an ``instance``
    foreign key), whether its row of ``context`` (keyed by ``instance``) holds a ``body`` and
    ``client_tools`` (``field_values``), then ``message``'s columns of the instance's stored
    messages by position, one row each (one row of NULLs: none; ``transcript_rows``' columns).
    Parameters: instance pk, two statuses, user pk, two statuses, instance pk, instance pk, body,
    client tools, instance pk."""

    def build(connection: BaseDatabaseWrapper) -> str:
        of_instance, of_user = Columns(turn, "t").bound(connection), Columns(turn, "u").bound(connection)
        c, m = Columns(context, "c").bound(connection), message.bound(connection)
        # NULL matches NULL; on PostgreSQL JSON columns compare as values, on SQLite as their texts.
        same = "IS" if connection.vendor == "sqlite" else "IS NOT DISTINCT FROM"
        return (f"SELECT q.newest, q.active, q.owned, q.kept, {m.select} FROM (SELECT "  # noqa: S608
                f"(SELECT MAX({of_instance('generation')}) FROM {of_instance.table} "
                f"WHERE {of_instance('instance')} = %s AND {of_instance('status')} IN (%s, %s)) AS newest, "
                f"(SELECT COUNT(*) FROM {of_user.table} WHERE {of_user('user')} = %s "
                f"AND {of_user('status')} IN (%s, %s)) AS active, "
                f"{_any_of_instance(owned, '%s', connection)} AS owned, "
                f"EXISTS (SELECT 1 FROM {c.table} WHERE {c('instance')} = %s AND {c('body')} {same} %s "
                f"AND {c('client_tools')} {same} %s) AS kept"
                f") q LEFT JOIN {m.table} ON {m('instance')} = %s ORDER BY {m('position')}")

    return Select(turn, build)


def _any_of_instance(owned: type[Model], instance: str, connection: BaseDatabaseWrapper) -> str:
    """``EXISTS``: the instance (``instance``: a parameter or a column) has a row of ``owned``."""
    o = Columns(owned, "o").bound(connection)
    return f"EXISTS (SELECT 1 FROM {o.table} WHERE {o('instance')} = {instance})"  # noqa: S608


@functools.cache
def latest_turn(turn: type[Model], status: str) -> Select:
    """An instance's newest turn (pk, status), and the pk of any one of its turns of a ``status``
    (NULL: none); parameters: instance pk, instance pk."""

    def build(connection: BaseDatabaseWrapper) -> str:
        t, other = Columns(turn, "t").bound(connection), Columns(turn, "q").bound(connection)
        return (f"SELECT {t('id')}, {t('status')}, (SELECT {other('id')} FROM {other.table} "  # noqa: S608
                f"WHERE {other('instance')} = %s AND {other('status')} = {_choice(status)} LIMIT 1) AS queued "
                f"FROM {t.table} "
                f"WHERE {t('instance')} = %s ORDER BY {t('id')} DESC LIMIT 1")

    return Select(turn, build)


@functools.cache
def newer_turn_and_queued(turn: type[Model], status: str) -> Returned:
    """``latest_turn``'s answer read back by the UPDATE of one turn (``update_returning``): the
    newest turn of its instance after it (pk, status; NULLs: it is the newest itself) and the pk
    of any turn of the instance of a ``status`` (NULL: none). The subqueries read other rows than
    the one written, which they see alike on both databases."""

    def build(connection: BaseDatabaseWrapper) -> str:
        written = table(turn, connection)
        instance = f"{written}.{_column(turn, 'instance', connection)}"
        n, q = Columns(turn, "n").bound(connection), Columns(turn, "q").bound(connection)
        newer = (f"FROM {n.table} WHERE {n('instance')} = {instance} "
                 f"AND {n('pk')} > {written}.{_column(turn, 'pk', connection)} ORDER BY {n('pk')} DESC LIMIT 1")
        return (f"(SELECT {n('pk')} {newer}), (SELECT {n('status')} {newer}), "  # noqa: S608
                f"(SELECT {q('pk')} FROM {q.table} WHERE {q('instance')} = {instance} "
                f"AND {q('status')} = {_choice(status)} LIMIT 1)")

    return Returned(build)


@functools.cache
def ended_requests_and_transcript(turn: type[Model], message: Columns) -> Select:
    """The request ids of an instance's turns whose status is none of three, as a JSON array (NULL
    or ``[]``: none), then ``message``'s columns of its stored messages by position, one row each
    (one row of NULLs: none), in one statement, so one snapshot: a turn's end stores its status
    and its reply in one transaction, and the ids name exactly the ends the transcript holds.
    Parameters: instance pk, three statuses, instance pk."""

    def build(connection: BaseDatabaseWrapper) -> str:
        t, m = Columns(turn, "t").bound(connection), message.bound(connection)
        ids = (f"json_agg({t('request_id')})::text" if connection.vendor == "postgresql"
               else f"json_group_array({t('request_id')})")
        return (f"SELECT ended.ids, {m.select} FROM (SELECT (SELECT {ids} FROM {t.table} "  # noqa: S608
                f"WHERE {t('instance')} = %s AND {t('status')} NOT IN (%s, %s, %s)) AS ids) ended "
                f"LEFT JOIN {m.table} ON {m('instance')} = %s ORDER BY {m('position')}")

    return Select(turn, build)


@functools.cache
def turn_instance_and_cancel_flag(turn: type[Model], instance: Columns, owned: type[Model]) -> Select:
    """A turn's instance (``instance``'s columns), whether the instance has rows of ``owned`` (as
    ``queue_user_and_transcript``) and the turn's ``cancel_requested``; parameter: the turn pk."""

    def build(connection: BaseDatabaseWrapper) -> str:
        i, t = instance.bound(connection), Columns(turn, "t").bound(connection)
        return (f"SELECT {i.select}, {_any_of_instance(owned, i('id'), connection)}, "  # noqa: S608
                f"{t('cancel_requested')} "
                f"FROM {t.table} JOIN {i.table} ON {i('id')} = {t('instance')} WHERE {t('id')} = %s")

    return Select(turn, build)


@functools.cache
def stream_and_segments(stream: Columns, segment: type[Model]) -> Select:
    """An instance's newest stream buffer of a request (``stream``'s columns) with each of its rows
    of chunks (``first_index``, ``bodies``) in order, one result row per chunk row (NULLs: none
    yet); no result row: no buffer. A replay's whole read in one round trip. Parameters: instance
    pk, request id."""

    def build(connection: BaseDatabaseWrapper) -> str:
        s, g = stream.bound(connection), Columns(segment, "g").bound(connection)
        newest = (f"SELECT {s.select} FROM {s.table} WHERE {s('instance')} = %s "  # noqa: S608
                  f"AND {s('request_id')} = %s ORDER BY {s('id')} DESC LIMIT 1")
        return (f"SELECT {s.select}, {g('first_index')}, {g('bodies')} FROM ({newest}) {stream.alias} "  # noqa: S608
                f"LEFT JOIN {g.table} ON {g('stream')} = {s('id')} ORDER BY {g('first_index')}")

    return Select(stream.model, build)


@functools.cache
def resume_state(instance: type[Model], stream: Columns, turn: Columns, incident: type[Model]) -> Select:
    """What a resume handshake reads of an instance, in one round trip where four queries took it:
    its ``terminal_request_id``; its newest stream of a status (``stream``'s columns) and that
    stream's turn (``turn``'s columns); the pk and request id of its newest turn of two statuses;
    the root request id of its newest incident of three statuses. NULLs: none. Parameters: the
    stream status, the two turn statuses, the three incident statuses, the instance pk."""

    def build(connection: BaseDatabaseWrapper) -> str:
        i, s, t = Columns(instance, "i").bound(connection), stream.bound(connection), turn.bound(connection)
        p, r = Columns(turn.model, "p").bound(connection), Columns(incident, "r").bound(connection)

        def newest(model: type[Model], statuses: int) -> str:
            """The pk of the instance's newest ``model`` row whose status is one of ``statuses`` parameters."""
            n = Columns(model, "n").bound(connection)
            among = ", ".join(["%s"] * statuses)
            return (f"(SELECT MAX({n('id')}) FROM {n.table} "  # noqa: S608
                    f"WHERE {n('instance')} = {i('id')} AND {n('status')} IN ({among}))")

        return (f"SELECT {i('terminal_request_id')}, {s.select}, {t.select}, {p('id')}, {p('request_id')}, "  # noqa: S608
                f"{r('root_request_id')} FROM {i.table} "
                f"LEFT JOIN {s.table} ON {s('id')} = {newest(stream.model, 1)} "
                f"LEFT JOIN {t.table} ON {t('id')} = {s('turn')} "
                f"LEFT JOIN {p.table} ON {p('id')} = {newest(turn.model, 2)} "
                f"LEFT JOIN {r.table} ON {r('id')} = {newest(incident, 3)} "
                f"WHERE {i('id')} = %s")

    return Select(instance, build)


@functools.cache
def transcript_rows(message: Columns) -> Select:
    """An instance's stored messages (``message``'s columns) by position; parameter: the instance pk."""

    def build(connection: BaseDatabaseWrapper) -> str:
        m = message.bound(connection)
        return f"SELECT {m.select} FROM {m.table} WHERE {m('instance')} = %s ORDER BY {m('position')}"  # noqa: S608

    return Select(message.model, build)


@functools.cache
def last_position(message: type[Model]) -> Select:
    """The highest position of an instance's stored messages (NULL: none); parameter: the instance pk."""

    def build(connection: BaseDatabaseWrapper) -> str:
        m = Columns(message, "m").bound(connection)
        return f"SELECT MAX({m('position')}) FROM {m.table} WHERE {m('instance')} = %s"  # noqa: S608

    return Select(message, build)


@functools.cache
def save_message(message: type[Model]) -> Write:
    """A message replaced in place (same instance and message id), or else inserted after the last
    (one statement where an UPDATE, a read of the last position and an INSERT took three)."""

    def build(connection: BaseDatabaseWrapper) -> str:
        name = table(message, connection)
        column = {field: connection.ops.quote_name(message._meta.get_field(field).column)
                  for field in ("instance", "message_id", "role", "position", "data", "created_at", "updated_at")}
        replaced = ", ".join(f"{column[field]} = EXCLUDED.{column[field]}" for field in ("role", "data", "updated_at"))
        return (f"INSERT INTO {name} ({', '.join(column.values())}) "  # noqa: S608
                f"VALUES (%s, %s, %s, (SELECT COALESCE(MAX({column['position']}), -1) + 1 FROM {name} "
                f"WHERE {column['instance']} = %s), %s, %s, %s) "
                f"ON CONFLICT ({column['instance']}, {column['message_id']}) DO UPDATE SET {replaced}")

    return Write(message, build, ("instance", "message_id", "role", "instance", "data", "created_at", "updated_at"))
