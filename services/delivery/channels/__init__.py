"""IM channels: chat platforms as a way runs begin, and the way their answers go back.

One adapter module per platform (`telegram`, `slack`, `feishu`, `dingtalk`,
`wecom`, `discord`, `matrix`, `signed_webhook`) behind one interface
(`adapter.py`), listed in `platforms.py`; the framework around them is shared:
thread mapping and inbound dedupe (`store.py`), commands (`commands.py`), the
answer streamed back (`replies.py`), the once-per-cluster connection holder
(`listening.py`), and the path from a delivery to `Admission.StartRun`
(`routing.py`).
"""
