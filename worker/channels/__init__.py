"""Channels: where replies go, and the WhatsApp Cloud API behind the main one.

:mod:`~worker.channels.channel` holds the channel protocol and the console and webhook channels;
:mod:`~worker.channels.whatsapp` the Cloud API sender; :mod:`~worker.channels.split` cuts a reply into whole messages;
:mod:`~worker.channels.window` is the 24-hour window and its template; :mod:`~worker.channels.media_download` fetches
a photo a player sent; :mod:`~worker.channels.token` tracks whether WhatsApp accepts the access token; and
:mod:`~worker.channels.ids` checks media ids.
"""
