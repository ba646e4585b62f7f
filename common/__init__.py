"""The one small package every Waybill service shares: settings, SQL, codecs, errors."""
