"""CloudFormation intrinsic functions, resolved locally: enough to deploy a CDK template on moto.

Pure: no I/O. `Resolver` turns `Ref`, `Fn::GetAtt`, `Fn::Join`, `Fn::Sub` (both forms),
`Fn::Select`, `Fn::Split`, `Fn::If` (with `Fn::Equals`/`Not`/`And`/`Or` conditions),
`Fn::FindInMap`, `Fn::Base64` and `Fn::GetAZs` plus the pseudo parameters into plain values,
given the physical ids and attributes of the resources created so far. `creation_order` sorts
a template's resources so that every resource comes after the ones it references.
`check_parameters` refuses the parameter values CloudFormation refuses at `cdk deploy
--parameters` (an unknown name, a `Number` that is not one or is out of its `MinValue`/`MaxValue`,
a value not in `AllowedValues`), so a local stack never runs with limits AWS would not deploy.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

NO_VALUE = "AWS::NoValue"
_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")


class TemplateError(ValueError):
    """The template uses something this resolver cannot honour; the message names the spot."""


def check_parameters(template: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """Raise `TemplateError` naming the first value CloudFormation would refuse (module
    docstring); the wording follows CloudFormation's validation errors."""
    declared: Mapping[str, Any] = template.get("Parameters", {})
    unknown = sorted(name for name in given if name not in declared)
    if unknown:
        raise TemplateError(f"Parameters: [{', '.join(unknown)}] do not exist in the template")
    for name, value in given.items():
        spec = declared[name]
        allowed = spec.get("AllowedValues")
        if allowed is not None and str(value) not in {str(a) for a in allowed}:
            raise TemplateError(f"Parameter '{name}' must be one of AllowedValues")
        if spec.get("Type") != "Number":
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise TemplateError(f"Parameter '{name}' must be a number, got {value!r}") from None
        low, high = spec.get("MinValue"), spec.get("MaxValue")
        if low is not None and number < float(low):
            raise TemplateError(f"Parameter '{name}' must be a number not less than {low}")
        if high is not None and number > float(high):
            raise TemplateError(f"Parameter '{name}' must be a number not greater than {high}")


@dataclass(frozen=True)
class StackContext:
    """Values of the pseudo parameters (`AWS::Region`, …) for one deployment."""

    stack_name: str
    region: str = "us-east-1"
    account_id: str = "123456789012"
    partition: str = "aws"
    url_suffix: str = "amazonaws.com"

    def pseudo(self, name: str) -> str | list[str] | None:
        values: dict[str, str | list[str]] = {
            "AWS::Region": self.region,
            "AWS::AccountId": self.account_id,
            "AWS::Partition": self.partition,
            "AWS::URLSuffix": self.url_suffix,
            "AWS::StackName": self.stack_name,
            "AWS::StackId": (
                f"arn:{self.partition}:cloudformation:{self.region}:{self.account_id}"
                f":stack/{self.stack_name}/00000000-0000-0000-0000-000000000000"
            ),
            "AWS::NotificationARNs": [],
        }
        return values.get(name)


@dataclass
class Resolver:
    """Resolves intrinsic functions against a template and the resources created so far.

    `refs` maps a logical id to what `Ref` returns; `attributes` maps a logical id to its
    `Fn::GetAtt` attributes. Both are filled by the deployer as it creates resources.
    """

    template: Mapping[str, Any]
    context: StackContext
    parameters: Mapping[str, Any] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def resolve(self, value: Any, where: str = "") -> Any:
        """`value` with every intrinsic function replaced; `AWS::NoValue` entries removed."""
        if isinstance(value, list):
            items = [self.resolve(item, f"{where}[{i}]") for i, item in enumerate(value)]
            return [item for item in items if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self._ref(arg, where)
            if key.startswith("Fn::"):
                return self._function(key, arg, where)
        resolved = {k: self.resolve(v, f"{where}.{k}" if where else k) for k, v in value.items()}
        return {k: v for k, v in resolved.items() if v is not _NO_VALUE}

    def condition(self, name: str) -> bool:
        conditions = self.template.get("Conditions", {})
        if name not in conditions:
            raise TemplateError(f"Conditions.{name}: no such condition")
        return self._condition_value(conditions[name], f"Conditions.{name}")

    # --- intrinsic functions -------------------------------------------------------------

    def _ref(self, name: Any, where: str) -> Any:
        if not isinstance(name, str):
            raise TemplateError(f"{where}: Ref needs a name, got {name!r}")
        if name == NO_VALUE:
            return _NO_VALUE
        pseudo = self.context.pseudo(name)
        if pseudo is not None:
            return pseudo
        if name in self.template.get("Parameters", {}):
            return self._parameter(name)
        if name in self.refs:
            return self.refs[name]
        if name in self.template.get("Resources", {}):
            raise TemplateError(f"{where}: Ref to {name}, which is not created yet")
        raise TemplateError(f"{where}: Ref to unknown name {name!r}")

    def _get_att(self, logical_id: str, attribute: str, where: str) -> Any:
        attrs = self.attributes.get(logical_id)
        if attrs is None:
            if logical_id in self.template.get("Resources", {}):
                raise TemplateError(f"{where}: Fn::GetAtt {logical_id}, which is not created yet")
            raise TemplateError(f"{where}: Fn::GetAtt on unknown resource {logical_id!r}")
        if attribute not in attrs:
            known = ", ".join(sorted(attrs)) or "none"
            raise TemplateError(
                f"{where}: {logical_id} has no attribute {attribute!r} here (known: {known})"
            )
        return attrs[attribute]

    def _parameter(self, name: str) -> Any:
        spec = self.template["Parameters"][name]
        if name in self.parameters:
            value = self.parameters[name]
        elif "Default" in spec:
            # SSM-typed parameters (CDK's BootstrapVersion) resolve to their default: the
            # parameter's SSM name, not looked up. Nothing the harness deploys reads them.
            value = spec["Default"]
        else:
            raise TemplateError(f"Parameters.{name}: no value given and no Default")
        kind = str(spec.get("Type", "String"))
        if isinstance(value, str) and (kind.startswith("List<") or kind == "CommaDelimitedList"):
            return [item.strip() for item in value.split(",")]
        return value

    def _function(self, name: str, arg: Any, where: str) -> Any:
        here = f"{where}.{name}" if where else name
        if name == "Fn::GetAtt":
            if isinstance(arg, str):
                logical_id, _, attribute = arg.partition(".")
            elif isinstance(arg, list) and len(arg) == 2:
                logical_id, attribute = arg[0], self.resolve(arg[1], here)
            else:
                raise TemplateError(f"{here}: expected [logicalId, attribute], got {arg!r}")
            return self._get_att(logical_id, attribute, here)
        if name == "Fn::Join":
            delimiter, items = self._pair(arg, here)
            parts = self.resolve(items, here)
            if not isinstance(parts, list):
                raise TemplateError(f"{here}: the second argument must be a list")
            return str(delimiter).join(_text(part, here) for part in parts)
        if name == "Fn::Sub":
            if isinstance(arg, str):
                return self._sub(arg, {}, here)
            text, variables = self._pair(arg, here)
            return self._sub(text, self.resolve(variables, here), here)
        if name == "Fn::Select":
            index, items = self._pair(arg, here)
            items = self.resolve(items, here)
            position = int(self.resolve(index, here))
            if not isinstance(items, list) or not 0 <= position < len(items):
                raise TemplateError(f"{here}: index {position} is outside {items!r}")
            return items[position]
        if name == "Fn::Split":
            delimiter, text = self._pair(arg, here)
            return _text(self.resolve(text, here), here).split(str(delimiter))
        if name == "Fn::If":
            if not isinstance(arg, list) or len(arg) != 3:
                raise TemplateError(f"{here}: expected [condition, if true, if false]")
            chosen = arg[1] if self.condition(arg[0]) else arg[2]
            return self.resolve(chosen, here)
        if name == "Fn::FindInMap":
            if not isinstance(arg, list) or len(arg) not in (3, 4):
                raise TemplateError(f"{here}: expected [map, top key, second key]")
            map_name, top, second = (self.resolve(a, here) for a in arg[:3])
            try:
                return self.template["Mappings"][map_name][top][second]
            except KeyError:
                raise TemplateError(f"{here}: {map_name}.{top}.{second} is not mapped") from None
        if name == "Fn::Base64":
            return base64.b64encode(_text(self.resolve(arg, here), here).encode()).decode()
        if name == "Fn::GetAZs":
            return [f"{self.context.region}{zone}" for zone in "abc"]
        if name in _CONDITION_FUNCTIONS:
            return self._condition_value({name: arg}, here)
        raise TemplateError(f"{here}: {name} is not supported by the local harness")

    def _sub(self, text: Any, variables: Mapping[str, Any], where: str) -> str:
        if not isinstance(text, str):
            raise TemplateError(f"{where}: the template string must be a string")

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):  # ${!Literal} is the escape for a literal ${Literal}
                return "${" + name[1:] + "}"
            if name in variables:
                return _text(variables[name], where)
            if "." in name and not name.startswith("AWS::"):
                logical_id, _, attribute = name.partition(".")
                return _text(self._get_att(logical_id, attribute, where), where)
            return _text(self._ref(name, where), where)

        return _SUB_VARIABLE.sub(replace, text)

    def _condition_value(self, value: Any, where: str) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str):
            return value.lower() == "true"
        if not isinstance(value, dict) or len(value) != 1:
            raise TemplateError(f"{where}: not a condition: {value!r}")
        ((name, arg),) = value.items()
        if name == "Condition":
            return self.condition(arg)
        if name == "Fn::Equals":
            left, right = self._pair(arg, where)
            return bool(self.resolve(left, where) == self.resolve(right, where))
        if name == "Fn::Not":
            return not self._condition_value(_only(arg, where), where)
        if name == "Fn::And":
            return all(self._condition_value(item, where) for item in arg)
        if name == "Fn::Or":
            return any(self._condition_value(item, where) for item in arg)
        raise TemplateError(f"{where}: {name} is not a condition function")

    @staticmethod
    def _pair(arg: Any, where: str) -> tuple[Any, Any]:
        if not isinstance(arg, list) or len(arg) != 2:
            raise TemplateError(f"{where}: expected a list of two arguments, got {arg!r}")
        return arg[0], arg[1]


class _NoValue:
    def __repr__(self) -> str:
        return NO_VALUE


_NO_VALUE: Any = _NoValue()
_CONDITION_FUNCTIONS = {"Fn::Equals", "Fn::Not", "Fn::And", "Fn::Or"}


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise TemplateError(f"{where}: expected a string, got {value!r}")


def _only(arg: Any, where: str) -> Any:
    if isinstance(arg, list) and len(arg) == 1:
        return arg[0]
    raise TemplateError(f"{where}: expected a list of one condition")


def references(value: Any) -> Iterator[str]:
    """Every name `value` points at through `Ref`, `Fn::GetAtt` or `Fn::Sub`."""
    if isinstance(value, list):
        for item in value:
            yield from references(item)
    elif isinstance(value, dict):
        for key, arg in value.items():
            if key == "Ref" and isinstance(arg, str):
                yield arg
            elif key == "Fn::GetAtt":
                yield arg.partition(".")[0] if isinstance(arg, str) else arg[0]
            elif key == "Fn::Sub":
                text = arg if isinstance(arg, str) else arg[0]
                given = {} if isinstance(arg, str) else arg[1]
                for name in _SUB_VARIABLE.findall(text):
                    if not name.startswith("!") and name not in given:
                        yield name.partition(".")[0] if "." in name else name
                if not isinstance(arg, str):
                    yield from references(arg[1])
            else:
                yield from references(arg)


def creation_order(template: Mapping[str, Any]) -> list[str]:
    """Logical ids in an order where each resource follows those it references or depends on.

    Stable: among resources whose dependencies are met, template order wins.
    """
    resources: Mapping[str, Any] = template.get("Resources", {})
    needs: dict[str, set[str]] = {}
    for logical_id, resource in resources.items():
        depends_on = resource.get("DependsOn", [])
        depends = {depends_on} if isinstance(depends_on, str) else set(depends_on)
        referenced = set(references(resource.get("Properties", {})))
        needs[logical_id] = {name for name in depends | referenced if name in resources}
    order: list[str] = []
    placed: set[str] = set()
    while len(order) < len(resources):
        ready = [i for i in resources if i not in placed and needs[i] <= placed]
        if not ready:
            stuck = sorted(set(resources) - placed)
            raise TemplateError(f"Resources: dependency cycle among {', '.join(stuck)}")
        order.extend(ready)
        placed.update(ready)
    return order
