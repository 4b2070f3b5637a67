"""The trained presets shipped with the package, one directory each.

Each directory holds a `config.json`, a `model.weights.h5` and a
`metadata.json`, as `save_to_preset` writes them; load one with
`from_preset(name)` on its model class, and list them with
`keras_capsules.models.list_presets()`. docs/presets.md tables them.
"""
