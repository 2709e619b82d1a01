"""Channels: where replies go, and the WhatsApp Cloud API behind the main one.

:mod:`~worker.delivery.channel` holds the channel protocol and the console and webhook channels;
:mod:`~worker.delivery.whatsapp` the Cloud API sender; :mod:`~worker.delivery.split` cuts a reply into whole messages;
:mod:`~worker.delivery.window` is the 24-hour window and its template; :mod:`~worker.delivery.media_download` fetches
a photo a player sent; :mod:`~worker.delivery.token` tracks whether WhatsApp accepts the access token; and
:mod:`~worker.delivery.ids` checks media ids.
"""
