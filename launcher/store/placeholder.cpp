namespace dtrain { int placeholder_store = 0; }
