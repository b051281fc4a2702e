"""The turn engine's per-turn statements, written as SQL once instead of built by a queryset each time.

Every turn makes the same few dozen statements on whichever process runs it. Django builds and
compiles a queryset for each call: measured on this project's models, 0.13 ms of CPU for an
``UPDATE`` of one row by its key and 0.7 ms for reading the next queued ``Turn`` (30 columns) with
its user, against 0.02 to 0.03 ms for the same statements written out (SQLite runs each in a few
microseconds). Per turn that was a third of its CPU (``bench/turn_cost.py``, bench/README.md
"Third round").

So the hottest ones are written here, from the models' own metadata (table and column names,
each field's conversions to and from the database), their text made once per database:

* ``update``: ``UPDATE … SET … WHERE column = %s AND …``, values prepared as ``QuerySet.update``
  prepares them (``Field.get_db_prep_save``), returning the row count; ``update_returning``, the
  row read back in the same statement (``RETURNING``: SQLite 3.35+, check E007); ``lock_row``.
* ``insert`` and ``insert_many``: a new row (its key read back) or many, as ``save()`` and
  ``bulk_create`` write them (each field's ``pre_save`` then ``get_db_prep_save``); ``upsert``,
  as ``bulk_create(update_conflicts=True)`` writes one row.
* ``Select`` and ``Write``: a statement of another shape, its text written out once per database.
* ``Columns``: a model's columns in a hand-written ``SELECT``, and the values or the model
  instance made from them as the ORM's iterator makes them (each field's database converters,
  then ``Model.from_db``), so the code that receives them cannot tell the difference.

Anything else stays a queryset: these are for statements measured to matter, each one a plain
read or write of known rows. Both databases (SQLite and PostgreSQL) run the same text.
"""

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model, signals
from django.db.models.constants import OnConflict

Converter = Callable[[Any, Any, BaseDatabaseWrapper], Any]


@functools.cache
def _alias(model: type[Model]) -> str:
    return router.db_for_write(model)


def connection_for(model: type[Model]) -> BaseDatabaseWrapper:
    """The connection the ORM would write ``model``'s rows with (reads go there too: one database)."""
    return connections[_alias(model)]


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
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def update_returning(model: type[Model], where: dict[str, Any], returned: "Columns", **values: Any
                     ) -> tuple[Any, ...] | None:
    """``update`` of one row that reads back its ``returned`` columns as they are after it (in their
    order, unconverted: ``returned.values`` or ``returned.instance`` converts them); None when no
    row matched. One statement where a write and a read of the same row took two."""
    if not where:
        raise ValueError("statements.update_returning changes a row it names: give it a filter")
    connection = connection_for(model)
    sql = _update_returning_sql(model, tuple(values), tuple(where), returned, connection.alias)
    params = [_prepared(model, name, value, connection) for name, value in (*values.items(), *where.items())]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


@functools.cache
def _update_returning_sql(model: type[Model], columns: tuple[str, ...], conditions: tuple[str, ...],
                          returned: "Columns", alias: str) -> str:
    quote = connections[alias].ops.quote_name
    returning = ", ".join(quote(field.column) for field in returned.fields)
    return f"{_update_sql(model, columns, conditions, alias)} RETURNING {returning}"


def lock_row(model: type[Model], pk: Any, column: str) -> None:
    """Take the row's write lock for the rest of the transaction (``SET column = column``): writers
    of the same row wait for it on PostgreSQL; on SQLite every write waits for the database's one."""
    connection = connection_for(model)
    sql = _lock_sql(model, column, connection.alias)
    with connection.cursor() as cursor:
        cursor.execute(sql, [model._meta.pk.get_db_prep_value(pk, connection)])


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
def _insert_sql(model: type[Model], with_pk: bool, rows: int, returning: bool, alias: str) -> str:
    connection = connections[alias]
    fields = _insert_fields(model, with_pk)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    values = ", ".join([f"({', '.join(['%s'] * len(fields))})"] * rows)
    # Identifiers from the model's metadata, quoted; every value is a parameter.
    sql = f"INSERT INTO {table(model, connection)} ({columns}) VALUES {values}"  # noqa: S608
    if returning:
        returned, _params = connection.ops.return_insert_columns([model._meta.pk])
        sql += f" {returned}"
    return sql


def _check_no_receivers(model: type[Model]) -> None:
    if signals.pre_save.has_listeners(model) or signals.post_save.has_listeners(model):
        raise TypeError(f"{model.__name__} has save signal receivers: save() it, statements.insert sends none")


def _row_params(obj: Model, fields: Sequence[Field], connection: BaseDatabaseWrapper) -> list[Any]:
    return [f.get_db_prep_save(f.pre_save(obj, add=True), connection) for f in fields]


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
    with connection.cursor() as cursor:
        cursor.execute(sql, _row_params(obj, _insert_fields(model, with_pk), connection))
        if not with_pk:
            pk = cursor.fetchone()[0] if returning else connection.ops.last_insert_id(
                cursor, model._meta.db_table, model._meta.pk.column)
            obj.pk = pk
    obj._state.adding, obj._state.db = False, connection.alias


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
    with connection.cursor() as cursor:
        for start in range(0, len(objs), size):
            batch = objs[start:start + size]
            params = [value for obj in batch for value in _row_params(obj, fields, connection)]
            cursor.execute(_insert_sql(model, False, len(batch), False, connection.alias), params)
    for obj in objs:
        obj._state.adding, obj._state.db = False, connection.alias


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
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(model, unique, tuple(update), connection.alias),
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

    def execute(self, *values: Any) -> int:
        """Run it with ``values`` (one per name in ``params``); how many rows it wrote."""
        connection = self.connection
        prepared = [_prepared(self.model, name, value, connection) for name, value in zip(self.params, values,
                                                                                          strict=True)]
        with connection.cursor() as cursor:
            cursor.execute(self._text(connection), prepared)
            return int(cursor.rowcount)


class Select(Statement):
    """A ``SELECT`` over ``model``'s table (its values, already plain, are the parameters)."""

    def rows(self, *params: Any) -> list[tuple[Any, ...]]:
        connection = self.connection
        with connection.cursor() as cursor:
            cursor.execute(self._text(connection), params)
            return cursor.fetchall()

    def row(self, *params: Any) -> tuple[Any, ...] | None:
        connection = self.connection
        with connection.cursor() as cursor:
            cursor.execute(self._text(connection), params)
            return cursor.fetchone()


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
        """The instance in ``row[start:start + len(self)]`` (every concrete field); None for a LEFT
        JOIN that found no row."""
        if row[start + self._pk_index] is None:
            return None
        return self.model.from_db(connection.alias, self._attnames, self.values(row, start, connection))

    @functools.cached_property
    def _attnames(self) -> list[str]:
        return [field.attname for field in self.fields]

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
    """Per column, what the ORM's compiler applies to a value read from database ``alias``."""
    connection = connections[alias]
    found = []
    for index, field in enumerate(columns.fields):
        expression = field.get_col(columns.model._meta.db_table)
        converters = [*connection.ops.get_db_converters(expression), *field.get_db_converters(connection)]
        if converters:
            found.append((index, converters, expression))
    return found
