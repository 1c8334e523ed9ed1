"""Service-scoped notification templates keyed by (method, type)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from notee.api.auth import ServiceDep
from notee.api.deps import DbDep, RuntimeDep
from notee.api.models import TemplateIn, TemplateList, TemplateOut, errors
from notee.core.vocabulary import Method
from notee.domain import templates
from notee.domain.rules import TYPE_PATTERN
from notee.domain.templates import TemplateInput

router = APIRouter(prefix="/v1/templates", tags=["templates"])

MethodPath = Annotated[Method, Path(description="TOPIC | CYCLE | SINGLE")]
TypePath = Annotated[str, Path(alias="type", pattern=TYPE_PATTERN, description="Service-defined notification type")]


@router.put(
    "/{method}/{type}", response_model=TemplateOut, responses={201: {"model": TemplateOut, "description": "Created"}}
)
def put_template(
    method: MethodPath,
    type_: TypePath,
    body: TemplateIn,
    service: ServiceDep,
    db: DbDep,
    runtime: RuntimeDep,
    response: Response,
) -> templates.Template:
    """Create or update (201 when created). notification_key never changes; the version is bumped.
    A text that is not a template (docs/TEMPLATES.md: Liquid), or (CYCLE) a name without a default, is 422
    naming the field."""
    given = TemplateInput(
        title=body.title,
        body=body.body,
        data=body.data,
        ttl_seconds=body.ttl_seconds,
        priority=body.priority,
        defaults=body.defaults,
        variants={k: v.model_dump(exclude_none=True) for k, v in body.variants.items()} if body.variants else None,
        quiet_hours=body.quiet_hours,
        payload=body.payload,
    )
    template = templates.put_template(db, runtime.statements, service, method, type_, given)
    db.commit()
    response.status_code = 201 if template.created else 200
    return template


@router.get("", response_model=TemplateList)
def list_templates(service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> TemplateList:
    """Every template of the service."""
    return TemplateList(
        items=[TemplateOut.model_validate(t) for t in templates.list_templates(db, runtime.statements, service)]
    )


@router.get("/{method}/{type}", response_model=TemplateOut, responses=errors(404))
def get_template(
    method: MethodPath, type_: TypePath, service: ServiceDep, db: DbDep, runtime: RuntimeDep
) -> templates.Template:
    """One template by method and type."""
    return templates.get_template(db, runtime.statements, service, method, type_)


@router.delete("/{method}/{type}", status_code=204, response_class=Response, responses=errors(404))
def delete_template(method: MethodPath, type_: TypePath, service: ServiceDep, db: DbDep, runtime: RuntimeDep) -> None:
    """Delete the template and its subscriptions."""
    templates.delete_template(db, runtime.statements, service, method, type_)
    db.commit()
